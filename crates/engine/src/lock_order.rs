//! The engine's lock order, checked in debug builds.
//!
//! Every lock above the leaf locks belongs to a [`Level`]; a thread takes
//! them in ascending level, and within a level in ascending key (an inode
//! number), so no two threads can wait for each other. The levels, what
//! each lock protects and the leaf locks are in docs/ARCHITECTURE.md,
//! "Concurrency and locking order" (the one written copy); this module is
//! its executable form.
//!
//! Debug builds keep the locks each thread holds and panic when one is
//! taken out of order, so a violation fails a test instead of deadlocking
//! a user now and then. Release builds keep nothing.

/// A lock's place in the order (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Byte-range locks of one file, held for a whole request.
    Range,
    /// `op_lock`: shared by operations, exclusive for checkpoints and cleaning.
    Op,
    /// Serializes renames across directories (keeps the tree acyclic).
    Rename,
    /// A directory's namespace lock.
    Dir,
    /// An inode's attribute lock.
    Inode,
    /// Serializes fsync chains in the warm node log.
    Chain,
    /// A node block's guard (at most one at a time).
    Node,
}

/// Proof that a lock of some level is recorded as held by this thread;
/// dropping it forgets the lock. Take it right before the lock itself.
#[must_use]
pub struct Held {
    #[cfg(debug_assertions)]
    entry: (Level, u64),
}

#[cfg(debug_assertions)]
thread_local! {
    static HELD: std::cell::RefCell<Vec<(Level, u64, bool)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Records that this thread is about to take the lock (`level`, `key`)
/// (`shared` for a read lock) and panics in debug builds if that breaks
/// the order. The operation lock taken shared again by a thread that holds
/// it shared is allowed (the facade's readers run inside its writers).
pub fn acquire(level: Level, key: u64, shared: bool) -> Held {
    #[cfg(debug_assertions)]
    HELD.with(|held| {
        let mut held = held.borrow_mut();
        let recursive_read =
            level == Level::Op && shared && held.iter().any(|&(l, _, s)| l == Level::Op && s);
        if !recursive_read {
            if let Some(&(l, k, _)) = held.iter().find(|&&(l, k, _)| (l, k) >= (level, key)) {
                panic!(
                    "lock order: taking {level:?} {key} while holding {l:?} {k} (held: {:?})",
                    *held
                );
            }
        }
        held.push((level, key, shared));
    });
    // Release builds record nothing.
    let _ = (level, key, shared);
    Held {
        #[cfg(debug_assertions)]
        entry: (level, key),
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        HELD.with(|held| {
            let mut held = held.borrow_mut();
            if let Some(at) = held.iter().rposition(|&(l, k, _)| (l, k) == self.entry) {
                held.remove(at);
            }
        });
    }
}

/// Panics in debug builds if this thread holds a lock of `level` or above:
/// for code that may wait for such a lock indirectly (e.g. for cleaning).
pub fn assert_none_from(level: Level) {
    #[cfg(debug_assertions)]
    HELD.with(|held| {
        if let Some(&(l, k, _)) = held.borrow().iter().find(|&&(l, _, _)| l >= level) {
            panic!("lock order: holding {l:?} {k} where nothing from {level:?} may be held");
        }
    });
    let _ = level;
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;

    #[test]
    fn ascending_is_allowed() {
        let _a = acquire(Level::Op, 0, true);
        let _b = acquire(Level::Dir, 3, false);
        let _c = acquire(Level::Dir, 7, false);
        let _d = acquire(Level::Inode, 2, false);
        let _e = acquire(Level::Op, 0, true);
    }

    #[test]
    #[should_panic(expected = "lock order")]
    fn descending_keys_panic() {
        let _a = acquire(Level::Inode, 9, false);
        let _b = acquire(Level::Inode, 4, false);
    }

    #[test]
    #[should_panic(expected = "lock order")]
    fn lower_level_after_higher_panics() {
        let _a = acquire(Level::Node, 1, false);
        let _b = acquire(Level::Dir, 2, false);
    }

    #[test]
    #[should_panic(expected = "lock order")]
    fn exclusive_op_inside_shared_panics() {
        let _a = acquire(Level::Op, 0, true);
        let _b = acquire(Level::Op, 0, false);
    }

    #[test]
    fn released_locks_are_forgotten() {
        {
            let _a = acquire(Level::Inode, 9, false);
        }
        let _b = acquire(Level::Inode, 4, false);
    }
}
