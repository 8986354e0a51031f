//! Tidy: rules about the shape of the source that neither rustc nor clippy enforce, checked by
//! reading the product code as text, in the spirit of TigerBeetle's `tidy.zig`. Std only.
//!
//! Product code is every file reachable from a crate root (`src/lib.rs`, `src/main.rs`,
//! `crates/*/src/lib.rs`) through `mod x;` declarations not marked `#[cfg(test)]`, minus every
//! `#[cfg(test)]` item inside those files. `tests/`, `benches/`, `examples/` and `build.rs` are
//! not product code.
//!
//! Both rules are ratchets. What breaks a rule today is written down in a list, the test fails
//! when anything new breaks it, and it also fails when a listed entry no longer breaks it, so
//! that the entry is deleted and cannot quietly come back: the lists only shrink.
//!
//! The scanner is a small lexer, not a parser: it blanks out comments, string, raw string, byte
//! string and char literals (keeping lifetimes, which look like unclosed chars), so that braces
//! and paths are only ever counted in code. Rust guarantees delimiters balance outside literals
//! and comments, which is all the brace matching needs.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The longest a product function may be, counted from the line with `fn` to the line with its
/// closing brace. TigerBeetle's number: a function that fits on a screen can be read whole, and
/// the limit pushes toward naming the steps of a long procedure as functions of their own.
const FUNCTION_LINES_MAX: usize = 70;

/// The functions longer than [`FUNCTION_LINES_MAX`] today: (path from the workspace, name,
/// length in lines). A listed function may not grow; once it is split to 70 lines or fewer (or
/// is gone) the test asks for its entry to be removed, so the list can only shrink.
#[rustfmt::skip]
const LONGER: &[(&str, &str, usize)] = &[
];

/// The pairs of files in one crate that import each other. Each such pair is one module in two
/// files: neither can be understood, tested or moved without the other. None is left (the last
/// five went with the crate split), so any pair fails the test; a pair listed here for a while
/// must be removed once it no longer imports both ways.
const CYCLES_TODAY: &[(&str, &str)] = &[];

/// Every function in product code is at most [`FUNCTION_LINES_MAX`] lines, but for [`LONGER`].
#[test]
fn product_functions_are_at_most_70_lines_but_for_a_shrinking_list() {
    let root = workspace();
    let files = product_files(&root);
    let mut found: BTreeMap<(String, String), Vec<(usize, usize)>> = BTreeMap::new();
    for file in &files {
        let scanned = Scanned::new(&read(&root, &file.path));
        for function in functions(&scanned.product_tokens, &scanned.lines) {
            if function.length > FUNCTION_LINES_MAX {
                let key = (file.path.clone(), function.name.clone());
                found
                    .entry(key)
                    .or_default()
                    .push((function.length, function.line));
            }
        }
    }
    let mut listed: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for &(path, name, length) in LONGER {
        listed
            .entry((path.to_string(), name.to_string()))
            .or_default()
            .push(length);
    }
    let mut problems = Vec::new();
    for key in found.keys().chain(listed.keys()).collect::<BTreeSet<_>>() {
        let (path, name) = key;
        // Functions of one name in one file (`new` in two impls) pair up longest with longest.
        let mut now = found.get(key).cloned().unwrap_or_default();
        now.sort_by(|a, b| b.cmp(a));
        let mut allowed = listed.get(key).cloned().unwrap_or_default();
        allowed.sort_by(|a, b| b.cmp(a));
        for (i, &(length, line)) in now.iter().enumerate() {
            match allowed.get(i) {
                None => problems.push(format!(
                    "{path}:{line}: fn {name} is {length} lines, over {FUNCTION_LINES_MAX}: \
                     split it (or, for code that predates this rule only, list it in LONGER as \
                     (\"{path}\", \"{name}\", {length}))"
                )),
                Some(&max) if length > max => problems.push(format!(
                    "{path}:{line}: fn {name} grew to {length} lines, past the {max} it is \
                     allowed in LONGER: shorten it, it may only shrink"
                )),
                Some(_) => {}
            }
        }
        for &max in allowed.iter().skip(now.len()) {
            problems.push(format!(
                "{path}: fn {name} is no longer over {FUNCTION_LINES_MAX} lines (or no longer \
                 exists): remove (\"{path}\", \"{name}\", {max}) from LONGER"
            ));
        }
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

/// No two product files of one crate import each other, but for [`CYCLES_TODAY`].
///
/// An edge A→B is a `use crate::…`/`super::…`/`self::…` or an inline `crate::a::b::…` path in
/// A's product code that names module file B (the deepest `x.rs`, `x/mod.rs` or `lib.rs` the
/// path reaches; an item maps to the file that defines or re-exports it). An edge to one of A's
/// ancestors (its `mod.rs`/`lib.rs` parents) does not count: a parent declaring its children
/// and re-exporting their items is structure, and the child reaching back for what the parent
/// holds is the ordinary direction. Paths into other crates are ignored: Cargo already forbids
/// crates to depend on each other in a cycle.
#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let root = workspace();
    let files = product_files(&root);
    let mut problems = Vec::new();
    let mut cycles: BTreeMap<(String, String), String> = BTreeMap::new();
    for krate in files.iter().map(|f| &f.krate).collect::<BTreeSet<_>>() {
        let members: Vec<&ModuleFile> = files.iter().filter(|f| &f.krate == krate).collect();
        let edges = import_edges(&root, &members);
        for ((a, b), why) in &edges {
            if a < b {
                if let Some(back) = edges.get(&(b.clone(), a.clone())) {
                    let text = format!("{a} -> {b} by {}; {b} -> {a} by {}", list(why), list(back));
                    cycles.insert((a.clone(), b.clone()), text);
                }
            }
        }
    }
    let listed: BTreeSet<(String, String)> = CYCLES_TODAY
        .iter()
        .map(|&(a, b)| {
            if a < b {
                (a.into(), b.into())
            } else {
                (b.into(), a.into())
            }
        })
        .collect();
    for (pair, text) in &cycles {
        if !listed.contains(pair) {
            problems.push(format!(
                "files import each other: {text}\n  move what both need into a third file, or \
                 have one of them take it as an argument"
            ));
        }
    }
    for (a, b) in &listed {
        if !cycles.contains_key(&(a.clone(), b.clone())) {
            problems.push(format!(
                "{a} and {b} no longer import each other: remove (\"{a}\", \"{b}\") from \
                 CYCLES_TODAY"
            ));
        }
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

/// tonic's constructors of a `Status`.
const STATUS_CONSTRUCTORS: &[&str] = &[
    "new",
    "with_details",
    "with_metadata",
    "with_details_and_metadata",
    "from_error",
    "ok",
    "cancelled",
    "unknown",
    "invalid_argument",
    "deadline_exceeded",
    "not_found",
    "already_exists",
    "permission_denied",
    "resource_exhausted",
    "failed_precondition",
    "aborted",
    "out_of_range",
    "unimplemented",
    "internal",
    "unavailable",
    "data_loss",
    "unauthenticated",
];

/// The node's error module, the one product file of the node that builds a `Status`.
const NODE_ERRORS: &str = "crates/leasehold-node/src/node/error.rs";

/// A client tells a node's refusal from a lost answer by the origin mark that only
/// `node_status` in [`NODE_ERRORS`] sets: so no other product file of the node builds a
/// `Status` (the CLI and the clients, which build their own, are other crates; tests are not
/// product code).
#[test]
fn every_status_the_node_makes_is_built_in_its_error_module_so_it_carries_the_origin() {
    let root = workspace();
    let mut built = Vec::new();
    for file in product_files(&root) {
        if !file.krate.starts_with("crates/leasehold-node/") || file.path == NODE_ERRORS {
            continue;
        }
        let scanned = Scanned::new(&read(&root, &file.path));
        for (line, what) in statuses_built(&scanned) {
            built.push(format!("{}:{line}: {what}", file.path));
        }
    }
    assert!(
        built.is_empty(),
        "statuses built outside {NODE_ERRORS} carry no origin mark, so a client takes them for \
         lost answers; make them NodeErrors:\n{}",
        built.join("\n")
    );
    // The scan finds what it looks for, in code only.
    let probe =
        "fn f() { Err(tonic::Status::unavailable(\"Status::ok\")); g.map_err(Status::internal) }";
    let found = statuses_built(&Scanned::new(probe));
    assert_eq!(
        found,
        [
            (1, "Status::unavailable".into()),
            (1, "Status::internal".into())
        ]
    );
}

/// Where `scanned`'s product code calls or names a constructor of `Status`: `(line, what)`.
fn statuses_built(scanned: &Scanned) -> Vec<(usize, String)> {
    scanned
        .product_tokens
        .windows(4)
        .filter(|w| w[0].is("Status") && w[1].is(":") && w[2].is(":"))
        .filter(|w| STATUS_CONSTRUCTORS.contains(&w[3].text.as_str()))
        .map(|w| {
            (
                line_of(&scanned.lines, w[0].pos),
                format!("Status::{}", w[3].text),
            )
        })
        .collect()
}

fn list(why: &BTreeSet<String>) -> String {
    why.iter().cloned().collect::<Vec<_>>().join(", ")
}

// ---------------------------------------------------------------------------------------------
// Files and modules.

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(root: &Path, path: &str) -> String {
    fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A file of some crate's module tree.
#[derive(Clone, Debug)]
struct ModuleFile {
    /// From the workspace root, with `/`.
    path: String,
    /// The crate root's path: the crate's name, for grouping.
    krate: String,
    /// The module's path inside its crate: `[]` for the root, `["raft", "log_store"]`.
    module: Vec<String>,
    /// Declared `#[cfg(test)]`, itself or through an ancestor.
    test: bool,
}

/// Files named like test modules. The `mod` declarations decide; a file named so but declared
/// without `#[cfg(test)]` fails the tidy tests, so that the name can be trusted when reading.
fn named_as_test(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap();
    name.ends_with("tests.rs") || name == "power_loss.rs" || name == "sim_disk.rs"
}

/// The source folders: `src/` and `crates/*/src/`.
fn source_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![root.join("src")];
    if let Ok(entries) = fs::read_dir(root.join("crates")) {
        let mut crates: Vec<PathBuf> = entries.map(|e| e.unwrap().path().join("src")).collect();
        crates.retain(|d| d.is_dir());
        crates.sort();
        dirs.extend(crates);
    }
    dirs
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rs_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn relative(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).unwrap();
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// Every file of every crate's module tree, walked from the crate roots through `mod x;`.
/// Panics on a source file no `mod` declaration reaches (the walk would be missing it) and on a
/// file named like a test module but declared as product code.
fn module_files(root: &Path) -> Vec<ModuleFile> {
    let mut files: Vec<ModuleFile> = Vec::new();
    let mut problems = Vec::new();
    for dir in source_dirs(root) {
        let mut roots = Vec::new();
        for name in ["lib.rs", "main.rs"] {
            if dir.join(name).is_file() {
                roots.push(dir.join(name));
            }
        }
        if dir.join("bin").is_dir() {
            let mut bins = Vec::new();
            rs_files(&dir.join("bin"), &mut bins);
            bins.retain(|b| b.parent() == Some(&dir.join("bin")));
            roots.extend(bins);
        }
        for crate_root in roots {
            let krate = relative(root, &crate_root);
            let mut stack = vec![(crate_root, Vec::<String>::new(), false)];
            while let Some((file, module, test)) = stack.pop() {
                let path = relative(root, &file);
                if files.iter().any(|f| f.path == path) {
                    continue;
                }
                let scanned = Scanned::new(&read(root, &path));
                for declared in scanned.module_declarations() {
                    let mut dir = file.parent().unwrap().to_path_buf();
                    let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
                    let is_dir_owner = module.is_empty() || stem == "mod";
                    if !is_dir_owner {
                        dir = dir.join(&stem);
                    }
                    let mut child = module.clone();
                    for inline in &declared.inside {
                        dir = dir.join(inline);
                        child.push(inline.clone());
                    }
                    child.push(declared.name.clone());
                    let flat = dir.join(format!("{}.rs", declared.name));
                    let nested = dir.join(&declared.name).join("mod.rs");
                    let target = if flat.is_file() {
                        flat
                    } else if nested.is_file() {
                        nested
                    } else {
                        problems.push(format!(
                            "{path}:{}: mod {} has neither {} nor {}",
                            declared.line,
                            declared.name,
                            relative(root, &flat),
                            relative(root, &nested)
                        ));
                        continue;
                    };
                    stack.push((target, child, test || declared.test));
                }
                files.push(ModuleFile {
                    path,
                    krate: krate.clone(),
                    module,
                    test,
                });
            }
        }
        let mut all = Vec::new();
        rs_files(&dir, &mut all);
        for file in all {
            let path = relative(root, &file);
            if !files.iter().any(|f| f.path == path) {
                problems.push(format!(
                    "{path}: no `mod` declaration reaches this file, so tidy cannot tell whether \
                     it is product code (declare it, or delete it)"
                ));
            }
        }
    }
    for file in &files {
        if named_as_test(&file.path) && !file.test {
            problems.push(format!(
                "{}: named like a test module but declared without #[cfg(test)]",
                file.path
            ));
        }
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files
}

fn product_files(root: &Path) -> Vec<ModuleFile> {
    let mut files = module_files(root);
    files.retain(|f| !f.test && !named_as_test(&f.path));
    files
}

// ---------------------------------------------------------------------------------------------
// The scanner.

/// One file, lexed.
struct Scanned {
    /// The text with comments and literals blanked (newlines kept, so lines still count).
    code: Vec<char>,
    tokens: Vec<Token>,
    /// `code` with every `#[cfg(test)]` item blanked as well.
    product_tokens: Vec<Token>,
    /// The offset each line starts at, in chars.
    lines: Vec<usize>,
}

/// An identifier (or keyword, or number) or a single punctuation char, at a char offset.
#[derive(Clone, Debug)]
struct Token {
    text: String,
    pos: usize,
}

impl Token {
    fn is(&self, text: &str) -> bool {
        self.text == text
    }

    fn is_ident(&self) -> bool {
        self.text
            .starts_with(|c: char| c == '_' || c.is_alphabetic())
    }
}

impl Scanned {
    fn new(text: &str) -> Scanned {
        let code = blank_comments_and_literals(text);
        let tokens = tokenize(&code);
        let mut product = code.clone();
        for (from, to) in test_ranges(&tokens, code.len()) {
            blank(&mut product, from, to);
        }
        let product_tokens = tokenize(&product);
        let mut lines = vec![0];
        lines.extend(
            code.iter()
                .enumerate()
                .filter(|(_, c)| **c == '\n')
                .map(|(i, _)| i + 1),
        );
        Scanned {
            code,
            tokens,
            product_tokens,
            lines,
        }
    }

    /// The `mod x;` declarations (not the inline `mod x { … }` ones).
    fn module_declarations(&self) -> Vec<ModuleDeclaration> {
        let tests = test_ranges(&self.tokens, self.code.len());
        let inline = inline_modules(&self.tokens);
        let t = &self.tokens;
        let mut out = Vec::new();
        for i in 0..t.len().saturating_sub(2) {
            if t[i].is("mod") && t[i + 1].is_ident() && t[i + 2].is(";") {
                let pos = t[i].pos;
                out.push(ModuleDeclaration {
                    name: t[i + 1].text.trim_start_matches("r#").to_string(),
                    line: line_of(&self.lines, pos),
                    inside: inline_path(&inline, pos),
                    test: tests.iter().any(|&(from, to)| from <= pos && pos < to),
                });
            }
        }
        out
    }
}

struct ModuleDeclaration {
    name: String,
    line: usize,
    /// The inline modules the declaration sits in, outermost first.
    inside: Vec<String>,
    test: bool,
}

fn blank(code: &mut [char], from: usize, to: usize) {
    let to = to.min(code.len());
    for c in &mut code[from..to] {
        if *c != '\n' {
            *c = ' ';
        }
    }
}

fn is_ident_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// The text, with every comment and string, raw string, byte string and char literal replaced
/// by spaces (newlines kept). Lifetimes (`'a`, `'static`) stay.
fn blank_comments_and_literals(text: &str) -> Vec<char> {
    let src: Vec<char> = text.chars().collect();
    let mut code = src.clone();
    let at = |i: usize| src.get(i).copied().unwrap_or('\0');
    let mut i = 0;
    while i < src.len() {
        let start = i;
        let end = match src[i] {
            '/' if at(i + 1) == '/' => (i..src.len())
                .find(|&j| src[j] == '\n')
                .unwrap_or(src.len()),
            '/' if at(i + 1) == '*' => end_of_block_comment(&src, i),
            '"' => end_of_string(&src, i),
            '\'' => match end_of_char(&src, i) {
                Some(end) => end,
                None => {
                    i += 1; // A lifetime or label: its name is lexed as an identifier next.
                    continue;
                }
            },
            c if is_ident_char(c) => {
                let mut j = i;
                while j < src.len() && is_ident_char(src[j]) {
                    j += 1;
                }
                let word: String = src[i..j].iter().collect();
                let raw = matches!(word.as_str(), "r" | "br" | "cr");
                let hashes = (j..src.len()).take_while(|&k| src[k] == '#').count();
                if raw && at(j + hashes) == '"' {
                    end_of_raw_string(&src, j + hashes, hashes)
                } else if raw && hashes == 1 && is_ident_char(at(j + 1)) {
                    // A raw identifier, `r#type`: lex `r`, `#`, then the identifier.
                    i = j;
                    continue;
                } else if matches!(word.as_str(), "b" | "c") && at(j) == '"' {
                    end_of_string(&src, j)
                } else if word == "b" && at(j) == '\'' {
                    end_of_char(&src, j).unwrap_or(j)
                } else {
                    i = j;
                    continue;
                }
            }
            _ => {
                i += 1;
                continue;
            }
        };
        blank(&mut code, start, end);
        i = end.max(start + 1);
    }
    code
}

/// Past the `*/` closing the (possibly nested) block comment opening at `i`.
fn end_of_block_comment(src: &[char], i: usize) -> usize {
    let mut depth = 0;
    let mut j = i;
    while j < src.len() {
        if src[j] == '/' && src.get(j + 1) == Some(&'*') {
            depth += 1;
            j += 2;
        } else if src[j] == '*' && src.get(j + 1) == Some(&'/') {
            depth -= 1;
            j += 2;
            if depth == 0 {
                return j;
            }
        } else {
            j += 1;
        }
    }
    src.len()
}

/// Past the `"` closing the string whose opening `"` is at `i`.
fn end_of_string(src: &[char], i: usize) -> usize {
    let mut j = i + 1;
    while j < src.len() {
        match src[j] {
            '\\' => j += 2,
            '"' => return j + 1,
            _ => j += 1,
        }
    }
    src.len()
}

/// Past the `"` and `hashes` `#`s closing the raw string whose opening `"` is at `i`.
fn end_of_raw_string(src: &[char], i: usize, hashes: usize) -> usize {
    let mut j = i + 1;
    while j < src.len() {
        if src[j] == '"' && (1..=hashes).all(|k| src.get(j + k) == Some(&'#')) {
            return j + 1 + hashes;
        }
        j += 1;
    }
    src.len()
}

/// Past the char literal whose `'` is at `i`, or None when the `'` opens a lifetime or label.
fn end_of_char(src: &[char], i: usize) -> Option<usize> {
    match (src.get(i + 1), src.get(i + 2)) {
        (Some('\\'), Some(_)) => {
            // `'\n'`, `'\''`, `'\\'`, `'\x7b'`, `'\u{7b}'`: the escaped char, then up to `'`.
            let mut j = i + 3;
            while j < src.len() && src[j] != '\'' {
                if src[j] == '\n' {
                    return None;
                }
                j += 1;
            }
            Some(j + 1)
        }
        (Some(c), Some('\'')) if *c != '\'' => Some(i + 3),
        _ => None,
    }
}

fn tokenize(code: &[char]) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let c = code[i];
        if c.is_whitespace() {
            i += 1;
        } else if is_ident_char(c) {
            let start = i;
            while i < code.len() && is_ident_char(code[i]) {
                i += 1;
            }
            tokens.push(Token {
                text: code[start..i].iter().collect(),
                pos: start,
            });
        } else {
            tokens.push(Token {
                text: c.to_string(),
                pos: i,
            });
            i += 1;
        }
    }
    tokens
}

/// For each opening `(`, `[`, `{`, the index of the token closing it.
fn matching(tokens: &[Token]) -> Vec<Option<usize>> {
    let mut out = vec![None; tokens.len()];
    let mut open: Vec<usize> = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        match t.text.as_str() {
            "(" | "[" | "{" => open.push(i),
            ")" | "]" | "}" => {
                if let Some(o) = open.pop() {
                    out[o] = Some(i);
                }
            }
            _ => {}
        }
    }
    out
}

fn line_of(lines: &[usize], pos: usize) -> usize {
    lines.partition_point(|&start| start <= pos)
}

/// A `#[cfg(…)]`'s predicate (spaces removed) holds only under test: `test`, `all(…, test, …)`.
fn is_test_only(cfg: &str) -> bool {
    if cfg == "test" {
        return true;
    }
    let Some(inner) = cfg.strip_prefix("all(").and_then(|c| c.strip_suffix(')')) else {
        return false;
    };
    let mut depth = 0;
    let mut item = String::new();
    let mut items = Vec::new();
    for c in inner.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut item));
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
    items.push(item);
    items.iter().any(|i| i == "test")
}

/// The char ranges of the items marked `#[cfg(test)]`, attribute included. An inner
/// `#![cfg(test)]` marks the whole file (tidy does not look for it inside inline modules).
fn test_ranges(tokens: &[Token], len: usize) -> Vec<(usize, usize)> {
    let pairs = matching(tokens);
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if !tokens[i].is("#") {
            i += 1;
            continue;
        }
        let inner = tokens.get(i + 1).is_some_and(|t| t.is("!"));
        let open = i + 1 + usize::from(inner);
        let Some(close) = tokens
            .get(open)
            .filter(|t| t.is("["))
            .and_then(|_| pairs[open])
        else {
            i += 1;
            continue;
        };
        let attribute: String = tokens[open + 1..close]
            .iter()
            .map(|t| t.text.as_str())
            .collect();
        let cfg = attribute
            .strip_prefix("cfg(")
            .and_then(|a| a.strip_suffix(')'));
        if cfg.is_some_and(is_test_only) {
            if inner {
                out.push((0, len));
            } else {
                out.push((tokens[i].pos, item_end(tokens, &pairs, close + 1, len)));
            }
        }
        i = close + 1;
    }
    out
}

/// Where the item (or statement, field, variant, match arm) starting at token `i` ends, in
/// chars: after its `;`, its top-level `,`, or the `}` closing its first top-level block.
fn item_end(tokens: &[Token], pairs: &[Option<usize>], mut i: usize, len: usize) -> usize {
    let mut angle = 0usize;
    while i < tokens.len() {
        let t = &tokens[i];
        match t.text.as_str() {
            "(" | "[" => match pairs[i] {
                Some(close) => i = close,
                None => return len,
            },
            "{" => return pairs[i].map_or(len, |close| tokens[close].pos + 1),
            ";" => return t.pos + 1,
            "," if angle == 0 => return t.pos + 1,
            "}" | ")" | "]" => return t.pos,
            "<" => angle += 1,
            ">" => {
                let arrow = i > 0
                    && (tokens[i - 1].is("-") || tokens[i - 1].is("="))
                    && tokens[i - 1].pos + 1 == t.pos;
                if !arrow {
                    angle = angle.saturating_sub(1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    len
}

/// The inline modules, `mod x { … }`: (name, from, to) in chars.
fn inline_modules(tokens: &[Token]) -> Vec<(String, usize, usize)> {
    let pairs = matching(tokens);
    let mut out = Vec::new();
    for i in 0..tokens.len().saturating_sub(2) {
        if tokens[i].is("mod") && tokens[i + 1].is_ident() && tokens[i + 2].is("{") {
            if let Some(close) = pairs[i + 2] {
                out.push((tokens[i + 1].text.clone(), tokens[i].pos, tokens[close].pos));
            }
        }
    }
    out
}

/// The names of the inline modules around `pos`, outermost first.
fn inline_path(inline: &[(String, usize, usize)], pos: usize) -> Vec<String> {
    inline
        .iter()
        .filter(|(_, from, to)| *from < pos && pos < *to)
        .map(|(name, _, _)| name.clone())
        .collect()
}

#[derive(Debug, PartialEq)]
struct Function {
    name: String,
    /// The line of `fn`, from 1.
    line: usize,
    /// From the line of `fn` to the line of the closing brace, both included.
    length: usize,
}

/// Every function with a body, nested ones included (and counted in their parent too).
fn functions(tokens: &[Token], lines: &[usize]) -> Vec<Function> {
    let pairs = matching(tokens);
    let mut out = Vec::new();
    for i in 0..tokens.len() {
        if !tokens[i].is("fn") {
            continue;
        }
        let mut name = i + 1;
        if tokens.get(name).is_some_and(|t| t.is("r"))
            && tokens.get(name + 1).is_some_and(|t| t.is("#"))
        {
            name += 2;
        }
        // `fn(u8) -> u8` is a type, not a function.
        if !tokens.get(name).is_some_and(Token::is_ident) {
            continue;
        }
        let mut j = name + 1;
        while j < tokens.len() {
            match tokens[j].text.as_str() {
                "(" | "[" => match pairs[j] {
                    Some(close) => j = close + 1,
                    None => break,
                },
                "{" => {
                    if let Some(close) = pairs[j] {
                        let line = line_of(lines, tokens[i].pos);
                        let last = line_of(lines, tokens[close].pos);
                        let name = tokens[name].text.clone();
                        out.push(Function {
                            name,
                            line,
                            length: last - line + 1,
                        });
                    }
                    break;
                }
                ";" | "}" => break, // No body: a declaration in a trait or an extern block.
                _ => j += 1,
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Imports.

/// A path naming something in the same crate, made absolute: `crate::raft::Foo` read in
/// `raft/proposer.rs` as `super::Foo` is `["raft", "Foo"]`.
#[derive(Debug, PartialEq)]
struct Reference {
    absolute: Vec<String>,
    /// As written, for messages.
    text: String,
    /// Written in a `use` (which a file may re-export), not inline.
    imported: bool,
    line: usize,
}

/// The references in `use crate::…`/`super::…`/`self::…` and in inline paths starting so, in
/// product code, of a file whose module path is `module`.
fn references(scanned: &Scanned, module: &[String]) -> Vec<Reference> {
    let tokens = &scanned.product_tokens;
    let pairs = matching(tokens);
    let inline = inline_modules(tokens);
    let mut out = Vec::new();
    // `use child::X` in a file that declares `mod child;` is `self::child::X`.
    let children: BTreeSet<String> = scanned
        .module_declarations()
        .into_iter()
        .filter(|d| d.inside.is_empty())
        .map(|d| d.name)
        .collect();
    let mut add = |segments: Vec<String>, pos: usize, imported: bool| {
        let text = segments.join("::");
        let mut segments = segments;
        if imported && children.contains(&segments[0]) {
            segments.insert(0, "self".into());
        }
        let mut here = module.to_vec();
        here.extend(inline_path(&inline, pos));
        if let Some(absolute) = absolute(&segments, &here) {
            let line = line_of(&scanned.lines, pos);
            out.push(Reference {
                absolute,
                text,
                imported,
                line,
            });
        }
    };
    let is_path_sep = |i: usize| {
        i + 1 < tokens.len()
            && tokens[i].is(":")
            && tokens[i + 1].is(":")
            && tokens[i].pos + 1 == tokens[i + 1].pos
    };
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        if t.is("use") && !tokens.get(i + 1).is_some_and(|n| n.is("<")) {
            let mut end = i + 1;
            while end < tokens.len() && !tokens[end].is(";") {
                end = if tokens[end].is("{") {
                    pairs[end].unwrap_or(tokens.len()) + 1
                } else {
                    end + 1
                };
            }
            let mut paths = Vec::new();
            use_tree(
                &tokens[i + 1..end.min(tokens.len())],
                &mut 0,
                Vec::new(),
                &mut paths,
            );
            for path in paths {
                add(path, t.pos, true);
            }
            i = end + 1;
            continue;
        }
        let root = t.is("crate") || t.is("super") || t.is("self");
        let continues = i >= 2 && is_path_sep(i - 2);
        if root && !continues && is_path_sep(i + 1) {
            let mut segments = vec![t.text.clone()];
            let mut j = i + 1;
            while is_path_sep(j) && tokens.get(j + 2).is_some_and(Token::is_ident) {
                segments.push(tokens[j + 2].text.clone());
                j += 3;
            }
            add(segments, t.pos, false);
            i = j;
            continue;
        }
        i += 1;
    }
    out
}

/// Expands a use tree (the tokens between `use` and `;`) into its paths; a glob ends in `*`.
fn use_tree(tokens: &[Token], i: &mut usize, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    while *i < tokens.len() {
        let t = &tokens[*i];
        *i += 1;
        match t.text.as_str() {
            "{" => {
                while *i < tokens.len() && !tokens[*i].is("}") {
                    use_tree(tokens, i, prefix.clone(), out);
                    if tokens.get(*i).is_some_and(|t| t.is(",")) {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            "*" => {
                prefix.push("*".into());
                break;
            }
            ":" | "$" => {}
            "as" => {
                *i += 1; // The alias.
                break;
            }
            "," | "}" => {
                *i -= 1;
                break;
            }
            // `use crate::a::{self, b}`: `self` is `crate::a`.
            _ if t.is("self") && !prefix.is_empty() => {}
            _ if t.is_ident() => prefix.push(t.text.clone()),
            _ => {}
        }
    }
    if !prefix.is_empty() {
        out.push(prefix);
    }
}

/// The module path `segments` names, read in module `here`; None for paths outside the crate.
fn absolute(segments: &[String], here: &[String]) -> Option<Vec<String>> {
    let mut path = match segments.first()?.as_str() {
        "crate" => Vec::new(),
        "self" | "super" => here.to_vec(),
        _ => return None,
    };
    for segment in segments {
        match segment.as_str() {
            "crate" | "self" => {}
            "super" => {
                path.pop()?;
            }
            "*" => break,
            name => path.push(name.to_string()),
        }
    }
    Some(path)
}

/// Within one crate: (from, to) → the references making that edge, as `text (line)`. A path
/// to an item that its file only imports (`super::Foo`, where `mod.rs` has `use b::Foo`) leads
/// on to the file that import names, so two siblings cannot hide a cycle behind their parent.
fn import_edges(
    root: &Path,
    files: &[&ModuleFile],
) -> BTreeMap<(String, String), BTreeSet<String>> {
    let by_module: BTreeMap<&[String], &ModuleFile> =
        files.iter().map(|f| (f.module.as_slice(), *f)).collect();
    let references: BTreeMap<&str, Vec<Reference>> = files
        .iter()
        .map(|f| {
            let scanned = Scanned::new(&read(root, &f.path));
            (f.path.as_str(), references(&scanned, &f.module))
        })
        .collect();
    // Per file: each name a `use` brings in → where it points.
    let imports: BTreeMap<&str, BTreeMap<&str, &[String]>> = references
        .iter()
        .map(|(path, refs)| {
            let names = refs
                .iter()
                .filter(|r| r.imported)
                .filter_map(|r| Some((r.absolute.last()?.as_str(), r.absolute.as_slice())))
                .filter(|(name, _)| *name != "*")
                .collect();
            (*path, names)
        })
        .collect();
    let mut edges: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for file in files {
        for reference in &references[file.path.as_str()] {
            let target = resolve(&reference.absolute, &by_module, &imports);
            let ancestor = file.module.starts_with(&target.module);
            if !ancestor {
                let why = format!("{} (line {})", reference.text, reference.line);
                edges
                    .entry((file.path.clone(), target.path.clone()))
                    .or_default()
                    .insert(why);
            }
        }
    }
    edges
}

/// The file that defines what `absolute` names: the deepest module file on the path, or, when
/// that file only imports the next name on the path, where its import points (a few hops at
/// most; a chain longer than that stops where it is).
fn resolve<'a>(
    absolute: &[String],
    by_module: &BTreeMap<&[String], &'a ModuleFile>,
    imports: &BTreeMap<&str, BTreeMap<&str, &[String]>>,
) -> &'a ModuleFile {
    let mut path = absolute.to_vec();
    let mut target = deepest(&path, by_module);
    for _ in 0..8 {
        let Some(name) = path.get(target.module.len()) else {
            break;
        };
        let Some(&points_to) = imports[target.path.as_str()].get(name.as_str()) else {
            break;
        };
        let mut next = points_to.to_vec();
        next.extend_from_slice(&path[target.module.len() + 1..]);
        if next == path {
            break;
        }
        path = next;
        target = deepest(&path, by_module);
    }
    target
}

/// The deepest module file whose module path is a prefix of `path`.
fn deepest<'a>(path: &[String], by_module: &BTreeMap<&[String], &'a ModuleFile>) -> &'a ModuleFile {
    (0..=path.len())
        .rev()
        .find_map(|n| by_module.get(&path[..n]).copied())
        .expect("the crate root is a prefix of every path")
}

// ---------------------------------------------------------------------------------------------
// The scanner's own tests.

#[cfg(test)]
mod scanner {
    use super::*;

    fn lengths(text: &str) -> Vec<(String, usize)> {
        let scanned = Scanned::new(text);
        functions(&scanned.product_tokens, &scanned.lines)
            .into_iter()
            .map(|f| (f.name, f.length))
            .collect()
    }

    fn pairs(names: &[(&str, usize)]) -> Vec<(String, usize)> {
        names.iter().map(|&(n, l)| (n.to_string(), l)).collect()
    }

    #[test]
    fn braces_in_strings_do_not_count() {
        let text =
            "fn a() {\n    let s = \"}}{ \\\" }\";\n    println!(\"{}\", s);\n}\nfn b() {}\n";
        assert_eq!(lengths(text), pairs(&[("a", 4), ("b", 1)]));
    }

    #[test]
    fn braces_in_raw_and_byte_strings_do_not_count() {
        let text = concat!(
            "fn a() {\n",
            "    let x = r\"}\";\n",
            "    let y = r#\"}\" { \"#;\n",
            "    let z = br##\"}\"#}\"##;\n",
            "    let w = b\"}\\\"}\";\n",
            "}\n",
            "fn r#try() {}\n",
        );
        assert_eq!(lengths(text), pairs(&[("a", 6), ("try", 1)]));
    }

    #[test]
    fn char_literals_are_not_lifetimes() {
        let text = concat!(
            "fn a<'a>(x: &'a str) -> &'static str {\n",
            "    let c = ['{', '\\'', '\\u{7b}', '\\\\', b'}', '\"'];\n",
            "    'outer: loop { break 'outer; }\n",
            "    x\n",
            "}\n",
            "fn b() {}\n",
        );
        assert_eq!(lengths(text), pairs(&[("a", 5), ("b", 1)]));
    }

    #[test]
    fn comments_do_not_count() {
        let text = concat!(
            "fn a() {\n",
            "    // }\n",
            "    /* } /* nested } */ still { in the comment */\n",
            "    /// }\n",
            "}\n",
            "fn b() {}\n",
        );
        assert_eq!(lengths(text), pairs(&[("a", 5), ("b", 1)]));
    }

    #[test]
    fn declarations_are_skipped_and_nested_functions_count() {
        let text = concat!(
            "trait T {\n",
            "    fn declared(&self) -> [u8; 4];\n",
            "    fn defaulted(&self) {}\n",
            "}\n",
            "fn outer(f: fn(u8) -> u8) {\n",
            "    fn inner() {\n",
            "    }\n",
            "}\n",
        );
        assert_eq!(
            lengths(text),
            pairs(&[("defaulted", 1), ("outer", 4), ("inner", 2)])
        );
    }

    #[test]
    fn cfg_test_items_are_skipped() {
        let text = concat!(
            "fn a() {}\n",
            "#[cfg(test)]\n",
            "mod tests {\n",
            "    fn helper() {}\n",
            "}\n",
            "struct S { x: u8, #[cfg(test)] y: Vec<u8>, z: u8 }\n",
            "impl S {\n",
            "    #[cfg(test)]\n",
            "    #[allow(dead_code)]\n",
            "    fn only_in_tests<A, B>(&self) -> u8 { 0 }\n",
            "    fn kept(&self) {}\n",
            "}\n",
            "#[cfg(all(test, unix))]\n",
            "fn also_only_in_tests() {}\n",
            "#[cfg(not(test))]\n",
            "fn b() {}\n",
        );
        assert_eq!(lengths(text), pairs(&[("a", 1), ("kept", 1), ("b", 1)]));
    }

    #[test]
    fn cfg_test_module_declarations_are_seen() {
        let scanned = Scanned::new("mod a;\n#[cfg(test)]\nmod b;\nmod c { mod d; }\n");
        let declared: Vec<(String, Vec<String>, bool)> = scanned
            .module_declarations()
            .into_iter()
            .map(|d| (d.name, d.inside, d.test))
            .collect();
        assert_eq!(
            declared,
            vec![
                ("a".to_string(), vec![], false),
                ("b".to_string(), vec![], true),
                ("d".to_string(), vec!["c".to_string()], false),
            ]
        );
    }

    #[test]
    fn siblings_reaching_each_other_through_their_parent_make_a_cycle() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| fs::write(dir.path().join(name), text).unwrap();
        write("lib.rs", "mod a;\nmod b;\npub use a::A;\nuse b::B;\n");
        write("a.rs", "use super::B;\npub struct A;\n");
        write("b.rs", "pub struct B;\nfn f() -> crate::A { todo!() }\n");
        let file = |path: &str, module: &[&str]| ModuleFile {
            path: path.into(),
            krate: "lib.rs".into(),
            module: module.iter().map(|m| m.to_string()).collect(),
            test: false,
        };
        let files = [
            file("lib.rs", &[]),
            file("a.rs", &["a"]),
            file("b.rs", &["b"]),
        ];
        let edges = import_edges(dir.path(), &files.iter().collect::<Vec<_>>());
        let found: Vec<String> = edges
            .iter()
            .map(|((from, to), why)| format!("{from} -> {to} by {}", list(why)))
            .collect();
        assert_eq!(
            found,
            vec![
                "a.rs -> b.rs by super::B (line 1)",
                "b.rs -> a.rs by crate::A (line 2)",
                "lib.rs -> a.rs by a::A (line 3)",
                "lib.rs -> b.rs by b::B (line 4)",
            ]
        );
    }

    #[test]
    fn references_are_made_absolute() {
        let text = concat!(
            "use crate::a::{b::{self, C}, d::*};\n",
            "use super::e as f;\n",
            "pub(crate) fn g() -> crate::h::I { self::j::k(); super::super::l::M }\n",
            "// crate::not::this\n",
            "fn n() { let _ = \"crate::nor::this\"; Self::o(); std::p::q(); }\n",
            "#[cfg(test)]\n",
            "mod tests { use crate::tests_only::X; }\n",
        );
        let scanned = Scanned::new(text);
        let found: Vec<String> = references(&scanned, &["x".to_string(), "y".to_string()])
            .into_iter()
            .map(|r| format!("{} @{}", r.absolute.join("::"), r.line))
            .collect();
        assert_eq!(
            found,
            vec![
                "a::b @1",
                "a::b::C @1",
                "a::d @1",
                "x::e @2",
                "h::I @3",
                "x::y::j::k @3",
                "l::M @3"
            ]
        );
    }
}
