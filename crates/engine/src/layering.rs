//! The module order written in lib.rs's docs, checked: a module that uses
//! one after it in the order (`crate::later::...` outside its unit tests),
//! a module missing from the order, or a root re-export used instead of a
//! module path fails the test.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

/// The order as lib.rs's docs write it: the backquoted names of the lines
/// after "its layering" up to the first blank doc line.
fn documented_order(lib: &str) -> Vec<String> {
    let docs: Vec<&str> = lib
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .map(|l| l.trim_start_matches("//!").trim())
        .collect();
    let start = docs
        .iter()
        .position(|l| l.contains("its layering"))
        .expect("lib.rs's docs state the layering");
    let list = docs[start..]
        .iter()
        .skip_while(|l| !l.is_empty())
        .skip(1)
        .take_while(|l| !l.is_empty());
    let mut order = Vec::new();
    for line in list {
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 1 {
                order.push(part.to_string());
            }
        }
    }
    order
}

/// The top-level modules each source file belongs to, with the code of
/// the file outside comments and its `#[cfg(test)] mod tests`.
fn sources(src: &Path) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let relative = path
                .strip_prefix(src)
                .unwrap()
                .to_string_lossy()
                .to_string();
            let module = relative
                .split('/')
                .next()
                .unwrap()
                .trim_end_matches(".rs")
                .to_string();
            let text = fs::read_to_string(&path).unwrap();
            let code = match text.find("#[cfg(test)]\nmod tests") {
                Some(end) => &text[..end],
                None => &text[..],
            };
            let code: String = code
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            out.push((relative, module, code));
        }
    }
    out
}

/// Every `crate::name` in `code`.
fn crate_paths(code: &str) -> Vec<String> {
    code.match_indices("crate::")
        .map(|(at, m)| {
            code[at + m.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

#[test]
fn modules_use_only_modules_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let order = documented_order(&fs::read_to_string(src.join("lib.rs")).unwrap());
    let rank: HashMap<&str, usize> = order
        .iter()
        .enumerate()
        .map(|(i, m)| (m.as_str(), i))
        .collect();
    assert!(
        rank.len() > 20,
        "lib.rs's order lists too few modules: {order:?}"
    );
    let mut problems = Vec::new();
    for (file, module, code) in sources(&src) {
        if module == "lib" || module == "layering" {
            continue;
        }
        let Some(&mine) = rank.get(module.as_str()) else {
            problems.push(format!(
                "{file}: module `{module}` is not in lib.rs's order"
            ));
            continue;
        };
        for used in crate_paths(&code) {
            if used == module {
                continue;
            }
            match rank.get(used.as_str()) {
                Some(&theirs) if theirs < mine => {}
                Some(_) => problems.push(format!("{file}: `{module}` uses `{used}`, above it")),
                None => problems.push(format!(
                    "{file}: `crate::{used}` is not a module (use the module's own path)"
                )),
            }
        }
    }
    assert!(
        problems.is_empty(),
        "layering broken:\n{}",
        problems.join("\n")
    );
}

#[test]
fn an_upward_use_is_found() {
    let lib = "//! its layering:\n//!\n//! `low` < `high`\n\nmod low;\n";
    assert_eq!(documented_order(lib), ["low", "high"]);
    assert_eq!(
        crate_paths("use crate::high::X; crate::low::y()"),
        ["high", "low"]
    );
}
