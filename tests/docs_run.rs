//! Every command block README.md and the pages under docs/ show runs, as a
//! reader runs it from the repository root: each page in a directory of its
//! own holding `datasets/` and `rubrics/`, its blocks in order, so a page
//! may use what its earlier blocks wrote.
//!
//! A block's info string says how it is checked:
//! - `console`: each `$ ` command runs and must print what the block shows
//!   under it (`[..]` stands for any text within a line: a digest, an id, a
//!   date);
//! - `sh`: the block runs as one bash script and must exit 0; what it starts
//!   in the background is stopped when it ends;
//! - `sh bench`: a benchmark's recipe (minutes, peers to install), run when
//!   measuring, not here;
//! - `usage`: a synopsis, which `docs_commands` parses.
//!
//! Any other block showing a `routeval` command fails the test, so no
//! command is shown that nothing runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{CodeBlock, binary, code_blocks, copy_tree, data_dir, page_name, pages};

/// How one block is run.
#[derive(Debug)]
enum Run {
    /// Commands, each with the lines it prints.
    Console(Vec<(String, Vec<String>)>),
    Script(String),
}

fn names_routeval(text: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim_start();
        line.starts_with("routeval ") || line.starts_with("$ routeval ")
    })
}

/// How `block` is run, `None` when it is not, or why it may not be shown.
fn run_of(block: &CodeBlock) -> Result<Option<Run>, String> {
    match block.info.as_str() {
        "console" => console(&block.text).map(|commands| Some(Run::Console(commands))),
        "sh" if names_routeval(&block.text) => Ok(Some(Run::Script(block.text.clone()))),
        // A developer's commands (cargo, pip), a benchmark, a synopsis.
        "sh" | "sh bench" | "usage" => Ok(None),
        _ if names_routeval(&block.text) => Err(format!(
            "a block showing a routeval command says how it is checked (```console, ```sh, \
             ```sh bench or ```usage), not ```{}",
            block.info
        )),
        _ => Ok(None),
    }
}

/// A console block's commands (a line ending in `\` goes on) and what each
/// prints.
fn console(text: &str) -> Result<Vec<(String, Vec<String>)>, String> {
    let mut commands: Vec<(String, Vec<String>)> = Vec::new();
    let mut continued = false;
    for line in text.lines() {
        if continued {
            let command = &mut commands.last_mut().expect("a command goes on").0;
            command.push('\n');
            command.push_str(line);
            continued = line.ends_with('\\');
        } else if let Some(command) = line.strip_prefix("$ ") {
            commands.push((command.to_owned(), Vec::new()));
            continued = command.ends_with('\\');
        } else {
            commands
                .last_mut()
                .ok_or("a console block starts with a `$ ` command")?
                .1
                .push(line.to_owned());
        }
    }
    Ok(commands)
}

/// Whether `line` is what `expected` shows, `[..]` matching any text.
fn matches(expected: &str, line: &str) -> bool {
    let pieces: Vec<&str> = expected.split("[..]").collect();
    let Some(rest) = line.strip_prefix(pieces[0]) else {
        return false;
    };
    if pieces.len() == 1 {
        return rest.is_empty();
    }
    let mut rest = rest;
    for piece in &pieces[1..pieces.len() - 1] {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    rest.ends_with(pieces[pieces.len() - 1])
}

/// What a script printed and how it ended.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `script` with bash in `directory`, the routeval under test first on
/// `PATH`. Output goes to files, not pipes, so a server the script leaves in
/// the background cannot hold the test open; the script's whole process
/// group is stopped once it ends.
fn bash(directory: &Path, script: &str, data: Option<&Path>) -> Ran {
    use std::os::unix::process::CommandExt;
    let logs = tempfile::tempdir().unwrap();
    let stdout = logs.path().join("stdout");
    let stderr = logs.path().join("stderr");
    let bin = binary();
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new("bash");
    command
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(directory)
        .env("PATH", path)
        .env_remove("ROUTEVAL_DATA")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .process_group(0);
    if let Some(data) = data {
        command.env("ROUTEVAL_DATA", data);
    }
    let mut child = command.spawn().unwrap();
    let group = format!("-{}", child.id());
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    stop_group(&group);
    if status.is_none() {
        let _ = child.wait();
    }
    Ran {
        code: status.and_then(|status| status.code()),
        stdout: std::fs::read_to_string(&stdout).unwrap(),
        stderr: std::fs::read_to_string(&stderr).unwrap(),
    }
}

/// Stops what is left of a process group: politely, then for good, and
/// waits until it is gone so the next block finds its ports free.
fn stop_group(group: &str) {
    let signal = |name: &str| {
        Command::new("kill")
            .args([name, "--", group])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    if !signal("-TERM") {
        return;
    }
    let started = Instant::now();
    let mut killed = false;
    // Bounded: a process that has died but is not yet reaped still answers
    // signal 0.
    while signal("-0") && started.elapsed() < Duration::from_secs(10) {
        if !killed && started.elapsed() > Duration::from_secs(5) {
            killed = signal("-KILL");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A directory as the repository root looks to a reader: its inputs, and
/// nothing the docs' commands write.
fn sandbox() -> tempfile::TempDir {
    let directory = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for inputs in ["datasets", "rubrics"] {
        copy_tree(&root.join(inputs), &directory.path().join(inputs));
    }
    directory
}

/// What running one page did.
struct PageRun {
    directory: tempfile::TempDir,
    blocks: usize,
    commands: Vec<String>,
    skipped: usize,
}

/// Runs the runnable blocks of `page` in order, panicking with the page,
/// line and command of the first that does not do what the page shows.
fn run_page(page: &Path) -> PageRun {
    let name = page_name(page);
    let text = std::fs::read_to_string(page).unwrap();
    let directory = sandbox();
    let mut run = PageRun {
        directory,
        blocks: 0,
        commands: Vec::new(),
        skipped: 0,
    };
    for block in code_blocks(&text) {
        let shown = match run_of(&block) {
            Ok(Some(shown)) => shown,
            Ok(None) => continue,
            Err(problem) => panic!("{name}:{}: {problem}", block.line),
        };
        let data = if block.text.contains("ROUTEVAL_DATA") {
            match data_dir(&format!("{name}:{}", block.line)) {
                Some(data) => Some(data),
                None => {
                    run.skipped += 1;
                    continue;
                }
            }
        } else {
            None
        };
        run.blocks += 1;
        let at = run.directory.path();
        match shown {
            Run::Script(script) => {
                let ran = bash(at, &script, data.as_deref());
                assert_eq!(
                    ran.code,
                    Some(0),
                    "{name}:{}: the block exits {:?}\n{script}\nstdout:\n{}\nstderr:\n{}",
                    block.line,
                    ran.code,
                    ran.stdout,
                    ran.stderr
                );
                run.commands.extend(
                    script
                        .lines()
                        .filter(|line| line.trim_start().starts_with("routeval "))
                        .map(str::to_owned),
                );
            }
            Run::Console(commands) => {
                for (command, expected) in commands {
                    let ran = bash(at, &command, data.as_deref());
                    assert_eq!(
                        ran.code,
                        Some(0),
                        "{name}:{}: `{command}` exits {:?}\n{}{}",
                        block.line,
                        ran.code,
                        ran.stdout,
                        ran.stderr
                    );
                    let printed: Vec<&str> = ran.stdout.lines().collect();
                    let differs = printed.len() != expected.len()
                        || printed
                            .iter()
                            .zip(&expected)
                            .any(|(line, shown)| !matches(shown, line));
                    assert!(
                        !differs,
                        "{name}:{}: `{command}`: the page shows\n{}\nit prints\n{}",
                        block.line,
                        expected.join("\n"),
                        ran.stdout
                    );
                    run.commands.push(command);
                }
            }
        }
    }
    run
}

#[test]
fn every_command_block_the_docs_show_runs_as_shown() {
    let mut blocks = 0;
    let mut skipped = 0;
    let mut ran_pages = Vec::new();
    for page in pages() {
        // README's own test below runs it.
        if page.ends_with("README.md")
            && page.parent() == Some(Path::new(env!("CARGO_MANIFEST_DIR")))
        {
            continue;
        }
        let run = run_page(&page);
        if run.blocks > 0 {
            ran_pages.push(page_name(&page));
        }
        blocks += run.blocks;
        skipped += run.skipped;
    }
    eprintln!(
        "{blocks} blocks run ({skipped} skipped without ROUTEVAL_DATA) from {}",
        ran_pages.join(", ")
    );
    for page in ["calibrate", "gate", "run", "serve", "simulate"] {
        let page = format!("docs/{page}.md");
        assert!(
            ran_pages.contains(&page),
            "{page} ran no block: {ran_pages:?}"
        );
    }
}

#[test]
fn the_readme_walk_through_prints_what_readme_shows() {
    let readme = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"));
    let run = run_page(&readme);
    let names: Vec<&str> = run
        .commands
        .iter()
        .map(|command| command.split_whitespace().nth(1).unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        ["calibrate", "keygen", "gate", "verify", "report", "drift"]
    );
    assert!(
        run.directory
            .path()
            .join("reports/example/report.html")
            .is_file()
    );
}

#[test]
fn a_block_is_checked_or_says_why_not() {
    let block = |info: &str, text: &str| CodeBlock {
        line: 1,
        info: info.to_owned(),
        text: text.to_owned(),
    };
    assert!(matches!(
        run_of(&block("sh", "routeval keygen --out k\n")),
        Ok(Some(Run::Script(_)))
    ));
    assert!(matches!(
        run_of(&block("sh", "cargo test --locked\n")),
        Ok(None)
    ));
    assert!(matches!(
        run_of(&block("usage", "routeval calibrate --results FILE\n")),
        Ok(None)
    ));
    assert!(
        run_of(&block("", "$ routeval calibrate --results r.csv\n"))
            .unwrap_err()
            .contains("says how it is checked")
    );
    let Ok(Some(Run::Console(commands))) = run_of(&block(
        "console",
        "$ routeval gate --a \\\n    --b\nchosen\n$ routeval verify x\nverified\n",
    )) else {
        panic!("a console block")
    };
    assert_eq!(commands.len(), 2);
    assert_eq!(commands[0].0, "routeval gate --a \\\n    --b");
    assert_eq!(commands[0].1, ["chosen"]);
}

#[test]
fn a_changed_output_or_a_failing_command_is_caught() {
    let directory = sandbox();
    let ran = bash(directory.path(), "routeval keygen --out k --taget 1", None);
    assert_eq!(ran.code, Some(2), "{}", ran.stderr);
    let ran = bash(directory.path(), "routeval keygen --out k", None);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let printed: Vec<&str> = ran.stdout.lines().collect();
    assert!(matches("secret key: k (keep it secret)", printed[0]));
    assert!(!matches("secret key: key (keep it secret)", printed[0]));
}

#[test]
fn what_a_block_leaves_running_is_stopped() {
    let directory = sandbox();
    let ran = bash(directory.path(), "sleep 600 &\necho $! > sleeper", None);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let pid = std::fs::read_to_string(directory.path().join("sleeper")).unwrap();
    let alive = Command::new("kill")
        .args(["-0", pid.trim()])
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(!alive, "the background sleep {} still runs", pid.trim());
}

#[test]
fn wildcards_match_within_a_line_only() {
    assert!(matches(
        "sha256 [..], expires [..]",
        "sha256 ab12, expires 2026"
    ));
    assert!(matches("exact", "exact"));
    assert!(!matches("exact", "exact and more"));
    assert!(!matches("a [..] c", "a b d"));
}
