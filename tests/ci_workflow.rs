//! The GitHub Actions workflow shipped in `ci/` calls routeval with flags the
//! current command line accepts.

use crate::common::shell_words;
use clap::Parser;
use routeval::cli::Cli;

/// The workflow's `env:` values, such as `ROUTEVAL_TARGET: "0.9"`.
fn variables(workflow: &str) -> Vec<(String, String)> {
    workflow
        .lines()
        .filter_map(|line| {
            let (name, value) = line.trim().split_once(": ")?;
            let value = value.split(" #").next()?.trim().trim_matches('"');
            name.chars()
                .all(|c| c.is_ascii_uppercase() || c == '_')
                .then(|| (name.to_owned(), value.to_owned()))
        })
        .collect()
}

/// Every `routeval …` command in the workflow, with the workflow's variables
/// substituted and other shell variables and expressions replaced by a
/// placeholder word.
fn commands(workflow: &str) -> Vec<Vec<String>> {
    let variables = variables(workflow);
    workflow
        .lines()
        .map(str::trim)
        .map(|line| line.strip_prefix("run: ").unwrap_or(line))
        .filter(|line| line.starts_with("routeval "))
        .map(|line| {
            let line = line.split(" > ").next().unwrap_or(line);
            let mut previous = String::new();
            shell_words(line)
                .into_iter()
                .map(|word| {
                    let mut word = word;
                    for (name, value) in &variables {
                        word = word.replace(&format!("${name}"), value);
                    }
                    let flag = std::mem::replace(&mut previous, word.clone());
                    if !word.contains('$') {
                        word
                    } else if flag == "--at" {
                        // What the step's `date -u ... +%Y-%m-%dT%H:%M:%SZ`
                        // writes (checked below).
                        "2026-12-31T00:00:00Z".to_owned()
                    } else {
                        "placeholder".to_owned()
                    }
                })
                .collect()
        })
        .collect()
}

#[test]
fn every_routeval_command_in_the_workflow_parses() {
    let workflow =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/ci/routeval.yml")).unwrap();
    let commands = commands(&workflow);
    let names: Vec<&str> = commands.iter().map(|command| command[1].as_str()).collect();
    assert_eq!(
        names,
        [
            "calibrate",
            "gate",
            "report",
            "verify",
            "drift",
            "report",
            "verify",
            "calibrate",
            "gate"
        ]
    );
    for command in &commands {
        if let Err(error) = Cli::try_parse_from(command) {
            panic!("{}: {error}", command.join(" "));
        }
    }
    // The instant `verify --at` is given is the shape it reads.
    assert!(
        workflow.contains("soon=$(date -u -d \"+$RENEW_DAYS days\" +%Y-%m-%dT%H:%M:%SZ)"),
        "the expiry step computes --at otherwise"
    );
}

fn ci_file(name: &str) -> String {
    std::fs::read_to_string(format!("{}/ci/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

#[test]
fn the_hourly_records_drift_workflow_parses() {
    let workflow = ci_file("records-drift.yml");
    assert!(workflow.contains("cron: \"7 * * * *\""));
    let commands = commands(&workflow);
    let names: Vec<&str> = commands.iter().map(|command| command[1].as_str()).collect();
    assert_eq!(names, ["verify", "drift"]);
    for command in &commands {
        if let Err(error) = Cli::try_parse_from(command) {
            panic!("{}: {error}", command.join(" "));
        }
    }
    assert!(commands[1].contains(&"--aggregates".to_owned()));
}

/// Shards 1..=N of the same ids: every id in exactly one.
fn assert_partition(shards: &[String]) {
    let parsed: Vec<routeval::run::Shard> = shards
        .iter()
        .map(|text| routeval::run::Shard::parse(text).unwrap())
        .collect();
    for id in (0..5000).map(|index| format!("prompt-{index}")) {
        let owners = parsed.iter().filter(|shard| shard.takes(&id)).count();
        assert_eq!(owners, 1, "{id} is in {owners} shards of {shards:?}");
    }
}

#[test]
fn the_github_matrix_runs_every_shard_once_and_merges_them_all() {
    let workflow = ci_file("shard-matrix.yml");
    let variables = variables(&workflow);
    let count: u32 = variables
        .iter()
        .find(|(name, _)| name == "SHARDS")
        .unwrap()
        .1
        .parse()
        .unwrap();
    let matrix_line = workflow
        .lines()
        .find(|line| line.trim().starts_with("shard: ["))
        .unwrap();
    let matrix: Vec<u32> = matrix_line
        .trim()
        .trim_start_matches("shard: [")
        .trim_end_matches(']')
        .split(',')
        .map(|value| value.trim().parse().unwrap())
        .collect();
    assert_eq!(matrix, (1..=count).collect::<Vec<_>>());
    let shards: Vec<String> = matrix.iter().map(|k| format!("{k}/{count}")).collect();
    assert_partition(&shards);
    // Each job's command, with its matrix value, parses; the merge names
    // every shard's directory.
    let run = workflow
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with("run: routeval run"))
        .unwrap();
    for k in &matrix {
        let line = run
            .trim_start_matches("run: ")
            .replace("${{ matrix.shard }}", &k.to_string())
            .replace("$SHARDS", &count.to_string());
        let words: Vec<String> = shell_words(&line)
            .into_iter()
            .map(|word| {
                if word.contains('$') {
                    "placeholder".to_owned()
                } else {
                    word
                }
            })
            .collect();
        let cli = Cli::try_parse_from(&words).unwrap();
        let routeval::cli::Command::Run(args) = cli.command else {
            panic!("not a run: {line}");
        };
        assert_eq!(args.shard.as_deref(), Some(format!("{k}/{count}").as_str()));
    }
    let merge = workflow
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with("run: routeval merge"))
        .unwrap();
    for k in &matrix {
        assert!(merge.contains(&format!("runs/shard-{k} ")), "{merge}");
    }
    Cli::try_parse_from(shell_words(merge.trim_start_matches("run: "))).unwrap();
}

#[test]
fn the_kubernetes_indexed_job_maps_completion_indexes_onto_every_shard() {
    let job = ci_file("k8s-indexed-job.yaml");
    let field = |name: &str| -> u32 {
        job.lines()
            .map(str::trim)
            .find_map(|line| line.strip_prefix(&format!("{name}: ")))
            .unwrap()
            .trim_matches('"')
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let completions = field("completions");
    let shards_env = job
        .lines()
        .skip_while(|line| !line.contains("name: SHARDS"))
        .nth(1)
        .unwrap()
        .trim()
        .trim_start_matches("value: ")
        .split_whitespace()
        .next()
        .unwrap()
        .trim_matches('"')
        .parse::<u32>()
        .unwrap();
    assert_eq!(completions, shards_env);
    let command = job
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with("- routeval run"))
        .unwrap()
        .trim_start_matches("- ");
    assert!(command.contains("--shard $((JOB_COMPLETION_INDEX + 1))/$SHARDS"));
    // The shell's arithmetic for every index Kubernetes hands out (0-based).
    let shards: Vec<String> = (0..completions)
        .map(|index| format!("{}/{shards_env}", index + 1))
        .collect();
    assert_partition(&shards);
    for shard in &shards {
        let line = command
            .replace("$((JOB_COMPLETION_INDEX + 1))/$SHARDS", shard)
            .replace(
                "$((JOB_COMPLETION_INDEX + 1))",
                shard.split('/').next().unwrap(),
            );
        Cli::try_parse_from(shell_words(&line)).unwrap();
    }
}

/// Every workflow in `ci/` installs routeval once per version, from a cache
/// keyed on it, instead of compiling it on every run.
#[test]
fn every_workflow_installs_routeval_from_a_cache_keyed_on_its_version() {
    for name in ["routeval.yml", "records-drift.yml", "shard-matrix.yml"] {
        let workflow = ci_file(name);
        let installs = workflow.matches("cargo install --locked").count();
        assert!(installs > 0, "{name}: installs nothing");
        assert_eq!(
            workflow
                .matches("key: routeval-${{ runner.os }}-${{ env.ROUTEVAL_VERSION }}")
                .count(),
            installs,
            "{name}: an install without its cache"
        );
        assert_eq!(
            workflow
                .matches("if: steps.routeval-cache.outputs.cache-hit != 'true'")
                .count(),
            installs,
            "{name}: an install that runs on a cache hit"
        );
        assert!(
            variables(&workflow)
                .iter()
                .any(|(variable, _)| variable == "ROUTEVAL_VERSION"),
            "{name}: no ROUTEVAL_VERSION to key the cache on"
        );
    }
}
