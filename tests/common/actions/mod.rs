//! A GitHub Actions runner for the workflows routeval ships, so that they
//! run in the tests as a team runs them: jobs in `needs` order with their
//! matrix, steps in order under their `if:`, `env`, `vars`, `secrets`,
//! `matrix`, `needs` and `steps.*.outputs` substituted, `GITHUB_OUTPUT`,
//! `GITHUB_ENV` and `GITHUB_STEP_SUMMARY` honoured, `::error::` lines
//! collected, and the effects of the actions the workflows use: checkout
//! (a clone of the scratch repository at the event's commit), cache
//! (restore and save under a key, across runs), upload and download of
//! artifacts, setup-python (a Python put first on `PATH`) and local
//! composite actions.

pub mod expression;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Map, Value, json};

use expression::{Scope, as_string, condition, interpolate};

use super::copy_tree;

/// What stays between runs: the cache, and what stands for the machine
/// (`HOME`, the tools on `PATH`).
pub struct Runner {
    pub root: PathBuf,
    /// Directories put first on `PATH` for every step.
    pub path: Vec<PathBuf>,
    /// What `actions/setup-python` puts on `PATH`.
    pub python_bin: Option<PathBuf>,
    pub vars: Map<String, Value>,
    pub secrets: Map<String, Value>,
    runs: usize,
}

/// The event a workflow runs on.
pub struct Event {
    pub name: &'static str,
    /// The commit checked out.
    pub sha: String,
    /// `github.event`.
    pub payload: Value,
    /// Without secrets (a pull request from a fork).
    pub from_fork: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conclusion {
    Success,
    Failure,
    Skipped,
}

/// One job (or one matrix instance of it) as it ended.
#[derive(Debug)]
pub struct JobRun {
    pub job: String,
    pub conclusion: Conclusion,
    /// `$GITHUB_STEP_SUMMARY`, all steps.
    pub summary: String,
    /// `::error::` lines and the log of each step that failed.
    pub errors: Vec<String>,
    /// Each step's name and whether it ran, failed or was skipped.
    pub steps: Vec<(String, Conclusion)>,
}

/// A whole workflow run: its jobs and the artifacts they uploaded.
#[derive(Debug)]
pub struct WorkflowRun {
    pub jobs: Vec<JobRun>,
    pub artifacts: PathBuf,
}

impl WorkflowRun {
    pub fn job(&self, name: &str) -> &JobRun {
        self.jobs
            .iter()
            .find(|job| job.job == name)
            .unwrap_or_else(|| panic!("no job {name} in {:?}", self.jobs))
    }

    pub fn artifact(&self, name: &str) -> PathBuf {
        let path = self.artifacts.join(name);
        assert!(
            path.is_dir(),
            "no artifact {name}: {:?}",
            self.artifact_names()
        );
        path
    }

    pub fn artifact_names(&self) -> Vec<String> {
        std::fs::read_dir(&self.artifacts)
            .map(|entries| {
                entries
                    .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl JobRun {
    pub fn step(&self, name: &str) -> Conclusion {
        self.steps
            .iter()
            .find(|(step, _)| step == name)
            .unwrap_or_else(|| panic!("no step {name:?} in {:?}", self.steps))
            .1
    }
}

impl Runner {
    pub fn new(root: &Path) -> Runner {
        std::fs::create_dir_all(root.join("home/.cargo/bin")).unwrap();
        std::fs::create_dir_all(root.join("cache")).unwrap();
        Runner {
            root: root.to_owned(),
            path: Vec::new(),
            python_bin: None,
            vars: Map::new(),
            secrets: Map::new(),
            runs: 0,
        }
    }

    pub fn home(&self) -> PathBuf {
        self.root.join("home")
    }

    /// Runs every job of `workflow` (the YAML as committed at the event's
    /// commit in `repository`) that the event triggers.
    pub fn run(&mut self, repository: &Path, workflow: &str, event: &Event) -> WorkflowRun {
        self.runs += 1;
        let run = self.root.join(format!("run-{}", self.runs));
        let artifacts = run.join("artifacts");
        std::fs::create_dir_all(&artifacts).unwrap();
        let text = git(repository, &["show", &format!("{}:{workflow}", event.sha)]);
        let document = yaml(&text);
        assert!(
            triggered_by(&document["on"], event.name),
            "{workflow} does not run on {}",
            event.name
        );
        let jobs = document["jobs"].as_object().unwrap().clone();
        let mut finished: BTreeMap<String, (Conclusion, Map<String, Value>)> = BTreeMap::new();
        let mut runs = Vec::new();
        let order: Vec<String> = topological(&jobs);
        for name in order {
            let job = &jobs[&name];
            let needs: Vec<String> = match &job["needs"] {
                Value::String(one) => vec![one.clone()],
                Value::Array(many) => many.iter().map(as_string).collect(),
                _ => Vec::new(),
            };
            let mut needs_context = Map::new();
            let mut needs_failed = false;
            for need in &needs {
                let (conclusion, outputs) = &finished[need];
                needs_failed |= *conclusion != Conclusion::Success;
                needs_context.insert(
                    need.clone(),
                    json!({"result": result_word(*conclusion), "outputs": outputs}),
                );
            }
            let context = Context {
                runner: self,
                repository,
                event,
                workflow: &document,
                artifacts: &artifacts,
                needs: Value::Object(needs_context),
                run: &run,
            };
            let contexts = context.base_contexts(&Value::Null, &Map::new());
            let scope = Scope {
                contexts: &contexts,
                failed: needs_failed,
                workspace: &run,
            };
            if !condition(job["if"].as_str(), &scope) {
                runs.push(JobRun {
                    job: name.clone(),
                    conclusion: Conclusion::Skipped,
                    summary: String::new(),
                    errors: Vec::new(),
                    steps: Vec::new(),
                });
                finished.insert(name, (Conclusion::Skipped, Map::new()));
                continue;
            }
            let mut conclusion = Conclusion::Success;
            let mut outputs = Map::new();
            for matrix in context.matrix(&job["strategy"]["matrix"], &contexts) {
                let (job_run, job_outputs) = context.job(&name, job, &matrix);
                if job_run.conclusion == Conclusion::Failure {
                    conclusion = Conclusion::Failure;
                }
                outputs.extend(job_outputs);
                runs.push(job_run);
            }
            finished.insert(name, (conclusion, outputs));
        }
        WorkflowRun {
            jobs: runs,
            artifacts,
        }
    }
}

fn result_word(conclusion: Conclusion) -> &'static str {
    match conclusion {
        Conclusion::Success => "success",
        Conclusion::Failure => "failure",
        Conclusion::Skipped => "skipped",
    }
}

fn triggered_by(on: &Value, event: &str) -> bool {
    match on {
        Value::String(one) => one == event,
        Value::Array(many) => many.iter().any(|one| one == event),
        Value::Object(map) => map.contains_key(event),
        _ => false,
    }
}

/// Jobs in an order in which each comes after what it needs.
fn topological(jobs: &Map<String, Value>) -> Vec<String> {
    let mut order: Vec<String> = Vec::new();
    while order.len() < jobs.len() {
        let before = order.len();
        for (name, job) in jobs {
            if order.contains(name) {
                continue;
            }
            let needs: Vec<String> = match &job["needs"] {
                Value::String(one) => vec![one.clone()],
                Value::Array(many) => many.iter().map(as_string).collect(),
                _ => Vec::new(),
            };
            if needs.iter().all(|need| order.contains(need)) {
                order.push(name.clone());
            }
        }
        assert!(order.len() > before, "a cycle among the jobs' needs");
    }
    order
}

/// One workflow run's fixed parts.
struct Context<'a> {
    runner: &'a Runner,
    repository: &'a Path,
    event: &'a Event,
    workflow: &'a Value,
    artifacts: &'a Path,
    needs: Value,
    run: &'a Path,
}

/// A step's environment and what it may change for later steps.
struct JobState {
    workspace: PathBuf,
    temp: PathBuf,
    env: Map<String, Value>,
    extra_path: Vec<PathBuf>,
    failed: bool,
    summary: String,
    errors: Vec<String>,
    steps: Vec<(String, Conclusion)>,
}

impl Context<'_> {
    fn base_contexts(&self, matrix: &Value, env: &Map<String, Value>) -> Map<String, Value> {
        let secrets = if self.event.from_fork {
            Map::new()
        } else {
            self.runner.secrets.clone()
        };
        let vars = if self.event.from_fork {
            Map::new()
        } else {
            self.runner.vars.clone()
        };
        let mut contexts = Map::new();
        contexts.insert(
            "github".into(),
            json!({
                "event_name": self.event.name,
                "event": self.event.payload,
                "sha": self.event.sha,
                "run_id": "4242",
                "repository": "team/routes",
                "workspace": self.run.join("workspace"),
            }),
        );
        contexts.insert("env".into(), Value::Object(env.clone()));
        contexts.insert("vars".into(), Value::Object(vars));
        contexts.insert("secrets".into(), Value::Object(secrets));
        contexts.insert("matrix".into(), matrix.clone());
        contexts.insert("needs".into(), self.needs.clone());
        contexts.insert(
            "runner".into(),
            json!({"os": "Linux", "temp": self.run.join("temp")}),
        );
        contexts.insert("steps".into(), json!({}));
        contexts.insert(
            "inputs".into(),
            self.event
                .payload
                .get("inputs")
                .cloned()
                .unwrap_or(json!({})),
        );
        contexts
    }

    /// The matrix's combinations: one key's list (or `fromJSON` of one),
    /// or none.
    fn matrix(&self, matrix: &Value, contexts: &Map<String, Value>) -> Vec<Value> {
        let Value::Object(keys) = matrix else {
            return vec![Value::Null];
        };
        let scope = Scope {
            contexts,
            failed: false,
            workspace: self.run,
        };
        let mut combinations = vec![Map::new()];
        for (key, values) in keys {
            let values = match values {
                Value::String(text) => {
                    let inner = text.trim().trim_start_matches("${{").trim_end_matches("}}");
                    expression::evaluate(inner, &scope)
                }
                other => other.clone(),
            };
            let values = values.as_array().expect("a matrix key's list").clone();
            combinations = combinations
                .into_iter()
                .flat_map(|combination| {
                    values.iter().map(move |value| {
                        let mut next = combination.clone();
                        next.insert(key.clone(), value.clone());
                        next
                    })
                })
                .collect();
        }
        combinations.into_iter().map(Value::Object).collect()
    }

    fn job(&self, name: &str, job: &Value, matrix: &Value) -> (JobRun, Map<String, Value>) {
        let label = match matrix {
            Value::Object(map) => format!(
                "{name}-{}",
                map.values().map(as_string).collect::<Vec<_>>().join("-")
            ),
            _ => name.to_owned(),
        };
        let base = self.run.join(&label);
        let mut state = JobState {
            workspace: base.join("workspace"),
            temp: base.join("temp"),
            env: Map::new(),
            extra_path: Vec::new(),
            failed: false,
            summary: String::new(),
            errors: Vec::new(),
            steps: Vec::new(),
        };
        std::fs::create_dir_all(&state.workspace).unwrap();
        std::fs::create_dir_all(&state.temp).unwrap();
        for env in [&self.workflow["env"], &job["env"]] {
            if let Value::Object(map) = env {
                for (key, value) in map {
                    let contexts = self.contexts(&state, matrix, &json!({}), None);
                    let value = self.interpolated(value, &contexts, &state);
                    state.env.insert(key.clone(), Value::String(value));
                }
            }
        }
        let mut steps_context = Map::new();
        let steps = job["steps"].as_array().cloned().unwrap_or_default();
        self.steps(&steps, &mut state, matrix, &mut steps_context, None);
        let contexts = self.contexts(&state, matrix, &Value::Object(steps_context), None);
        let mut outputs = Map::new();
        if let Value::Object(declared) = &job["outputs"] {
            for (key, value) in declared {
                outputs.insert(
                    key.clone(),
                    Value::String(self.interpolated(value, &contexts, &state)),
                );
            }
        }
        let conclusion = if state.failed {
            Conclusion::Failure
        } else {
            Conclusion::Success
        };
        (
            JobRun {
                job: name.to_owned(),
                conclusion,
                summary: state.summary,
                errors: state.errors,
                steps: state.steps,
            },
            outputs,
        )
    }

    fn contexts(
        &self,
        state: &JobState,
        matrix: &Value,
        steps: &Value,
        inputs: Option<&Value>,
    ) -> Map<String, Value> {
        let mut contexts = self.base_contexts(matrix, &state.env);
        contexts.insert("steps".into(), steps.clone());
        if let Some(inputs) = inputs {
            contexts.insert("inputs".into(), inputs.clone());
        }
        contexts
            .get_mut("runner")
            .unwrap()
            .as_object_mut()
            .unwrap()
            .insert("temp".into(), json!(state.temp));
        contexts
            .get_mut("github")
            .unwrap()
            .as_object_mut()
            .unwrap()
            .insert("workspace".into(), json!(state.workspace));
        contexts
    }

    fn interpolated(
        &self,
        value: &Value,
        contexts: &Map<String, Value>,
        state: &JobState,
    ) -> String {
        let scope = Scope {
            contexts,
            failed: state.failed,
            workspace: &state.workspace,
        };
        interpolate(&as_string(value), &scope)
    }

    fn steps(
        &self,
        steps: &[Value],
        state: &mut JobState,
        matrix: &Value,
        steps_context: &mut Map<String, Value>,
        inputs: Option<&Value>,
    ) {
        for (index, step) in steps.iter().enumerate() {
            let name = step["name"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| step["uses"].as_str().map(str::to_owned))
                .unwrap_or_else(|| format!("step {index}"));
            let contexts =
                self.contexts(state, matrix, &Value::Object(steps_context.clone()), inputs);
            let scope = Scope {
                contexts: &contexts,
                failed: state.failed,
                workspace: &state.workspace,
            };
            let wanted = match &step["if"] {
                Value::Bool(flag) => *flag && !state.failed,
                Value::String(text) => condition(Some(text), &scope),
                _ => condition(None, &scope),
            };
            if !wanted {
                state.steps.push((name, Conclusion::Skipped));
                continue;
            }
            let mut env = state.env.clone();
            if let Value::Object(map) = &step["env"] {
                for (key, value) in map {
                    env.insert(
                        key.clone(),
                        Value::String(self.interpolated(value, &contexts, state)),
                    );
                }
            }
            let mut with = Map::new();
            if let Value::Object(map) = &step["with"] {
                for (key, value) in map {
                    with.insert(
                        key.clone(),
                        Value::String(self.interpolated(value, &contexts, state)),
                    );
                }
            }
            let outcome = if let Some(script) = step["run"].as_str() {
                let script = self.interpolated(&json!(script), &contexts, state);
                self.shell(&script, &env, state, step["shell"].as_str())
            } else {
                let uses = step["uses"].as_str().expect("a step runs or uses");
                self.action(uses, &with, state, matrix)
            };
            let failed = outcome.is_err();
            let outputs = match outcome {
                Ok(outputs) => outputs,
                Err(log) => {
                    state.errors.push(format!("{name}: {log}"));
                    Map::new()
                }
            };
            if let Some(id) = step["id"].as_str() {
                steps_context.insert(
                    id.to_owned(),
                    json!({
                        "outputs": outputs,
                        "outcome": if failed { "failure" } else { "success" },
                    }),
                );
            }
            if failed && step["continue-on-error"] != Value::Bool(true) {
                state.failed = true;
            }
            state.steps.push((
                name,
                if failed {
                    Conclusion::Failure
                } else {
                    Conclusion::Success
                },
            ));
        }
    }

    /// A `run:` step in bash, with the files the runner reads back.
    fn shell(
        &self,
        script: &str,
        env: &Map<String, Value>,
        state: &mut JobState,
        shell: Option<&str>,
    ) -> Result<Map<String, Value>, String> {
        let files = state.temp.join("_runner");
        std::fs::create_dir_all(&files).unwrap();
        let (script_file, output, summary, env_file, path_file) = (
            files.join("step.sh"),
            files.join("output"),
            files.join("summary"),
            files.join("env"),
            files.join("path"),
        );
        std::fs::write(&script_file, script).unwrap();
        for file in [&output, &summary, &env_file, &path_file] {
            std::fs::write(file, "").unwrap();
        }
        let mut path: Vec<PathBuf> = state.extra_path.iter().rev().cloned().collect();
        path.extend(self.runner.path.iter().cloned());
        path.push(self.runner.home().join(".cargo/bin"));
        let system = std::env::var_os("PATH").unwrap_or_default();
        path.extend(std::env::split_paths(&system));
        let mut command = Command::new("bash");
        match shell {
            Some("bash") => command.args(["--noprofile", "--norc", "-eo", "pipefail"]),
            _ => command.args(["-e"]),
        };
        command
            .arg(&script_file)
            .current_dir(&state.workspace)
            .env_clear()
            .env("PATH", std::env::join_paths(path).unwrap())
            .env("HOME", self.runner.home())
            .env("CI", "true")
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_OUTPUT", &output)
            .env("GITHUB_STEP_SUMMARY", &summary)
            .env("GITHUB_ENV", &env_file)
            .env("GITHUB_PATH", &path_file)
            .env("GITHUB_WORKSPACE", &state.workspace)
            .env("GITHUB_EVENT_NAME", self.event.name)
            .env("GITHUB_SHA", &self.event.sha)
            .env("RUNNER_TEMP", &state.temp)
            .env("RUNNER_OS", "Linux");
        for (key, value) in env {
            command.env(key, as_string(value));
        }
        let result = command.output().unwrap();
        let stdout = String::from_utf8_lossy(&result.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&result.stderr).into_owned();
        for line in stdout.lines() {
            if let Some(message) = line.strip_prefix("::error::") {
                state.errors.push(message.to_owned());
            }
        }
        state
            .summary
            .push_str(&std::fs::read_to_string(&summary).unwrap());
        for (key, value) in key_values(&std::fs::read_to_string(&env_file).unwrap()) {
            state.env.insert(key, Value::String(value));
        }
        for line in std::fs::read_to_string(&path_file).unwrap().lines() {
            state.extra_path.push(PathBuf::from(line));
        }
        let outputs: Map<String, Value> = key_values(&std::fs::read_to_string(&output).unwrap())
            .into_iter()
            .map(|(key, value)| (key, Value::String(value)))
            .collect();
        if result.status.success() {
            Ok(outputs)
        } else {
            Err(format!(
                "exit {:?}\n--- stdout\n{stdout}--- stderr\n{stderr}",
                result.status.code()
            ))
        }
    }

    /// The effect of a `uses:` step.
    fn action(
        &self,
        uses: &str,
        with: &Map<String, Value>,
        state: &mut JobState,
        matrix: &Value,
    ) -> Result<Map<String, Value>, String> {
        let input = |key: &str| with.get(key).map(as_string).unwrap_or_default();
        let (action, _version) = uses.split_once('@').unwrap_or((uses, ""));
        match action {
            "actions/checkout" => {
                self.checkout(state, &input("fetch-depth"));
                Ok(Map::new())
            }
            "actions/cache/restore" => Ok(self.cache_restore(&input("key"), &input("path"))),
            "actions/cache/save" => {
                self.cache_save(&input("key"), &input("path"));
                Ok(Map::new())
            }
            "actions/upload-artifact" => self.upload(state, with),
            "actions/download-artifact" => {
                self.download(state, with);
                Ok(Map::new())
            }
            "actions/setup-python" => {
                let python = self
                    .runner
                    .python_bin
                    .clone()
                    .expect("the runner has a Python for setup-python");
                state.extra_path.push(python);
                Ok(Map::new())
            }
            local if local.starts_with("./") => {
                let directory = state.workspace.join(local);
                let text = std::fs::read_to_string(directory.join("action.yml"))
                    .map_err(|error| format!("{local}: {error}"))?;
                let action = yaml(&text);
                let mut inputs = Map::new();
                if let Value::Object(declared) = &action["inputs"] {
                    for (key, spec) in declared {
                        let value = with
                            .get(key)
                            .cloned()
                            .or_else(|| spec.get("default").cloned())
                            .unwrap_or(Value::String(String::new()));
                        inputs.insert(key.clone(), value);
                    }
                }
                let before = (state.failed, state.steps.len());
                state.failed = false;
                let mut steps_context = Map::new();
                let steps = action["runs"]["steps"].as_array().cloned().unwrap();
                self.steps(
                    &steps,
                    state,
                    matrix,
                    &mut steps_context,
                    Some(&Value::Object(inputs)),
                );
                let failed = state.failed;
                state.failed = before.0;
                if failed {
                    Err(format!("{local} failed"))
                } else {
                    Ok(Map::new())
                }
            }
            other => panic!("the runner does not know the action {other}"),
        }
    }

    fn checkout(&self, state: &JobState, depth: &str) {
        let workspace = &state.workspace;
        let origin = format!("file://{}", self.repository.display());
        git(workspace, &["init", "-q"]);
        git(workspace, &["remote", "add", "origin", &origin]);
        if depth == "0" {
            git(
                workspace,
                &[
                    "fetch",
                    "-q",
                    "origin",
                    "+refs/heads/*:refs/remotes/origin/*",
                ],
            );
            git(workspace, &["fetch", "-q", "origin", &self.event.sha]);
        } else {
            git(
                workspace,
                &["fetch", "-q", "--depth", "1", "origin", &self.event.sha],
            );
        }
        git(workspace, &["checkout", "-q", "--detach", &self.event.sha]);
    }

    fn expand(&self, path: &str) -> PathBuf {
        match path.strip_prefix("~/") {
            Some(rest) => self.runner.home().join(rest),
            None => PathBuf::from(path),
        }
    }

    fn cache_restore(&self, key: &str, path: &str) -> Map<String, Value> {
        let stored = self.runner.root.join("cache").join(key);
        let hit = stored.exists();
        if hit {
            let target = self.expand(path.trim());
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::copy(&stored, &target).unwrap();
        }
        let mut outputs = Map::new();
        outputs.insert("cache-hit".into(), json!(hit.to_string()));
        outputs
    }

    fn cache_save(&self, key: &str, path: &str) {
        let stored = self.runner.root.join("cache").join(key);
        if !stored.exists() {
            std::fs::copy(self.expand(path.trim()), stored).unwrap();
        }
    }

    /// upload-artifact@v4: the files the paths match, less the `!`
    /// exclusions, kept relative to the paths' common directory; a name
    /// already used in the run fails the step.
    fn upload(
        &self,
        state: &JobState,
        with: &Map<String, Value>,
    ) -> Result<Map<String, Value>, String> {
        let name = as_string(&with["name"]);
        let target = self.artifacts.join(&name);
        if target.exists() {
            return Err(format!("an artifact named {name} exists already"));
        }
        let lines: Vec<String> = as_string(&with["path"])
            .lines()
            .map(|line| line.trim().to_owned())
            .filter(|line| !line.is_empty())
            .collect();
        let excluded: Vec<PathBuf> = lines
            .iter()
            .filter_map(|line| line.strip_prefix('!'))
            .map(|line| state.workspace.join(line.trim_end_matches('/')))
            .collect();
        let mut files = Vec::new();
        for line in lines.iter().filter(|line| !line.starts_with('!')) {
            let path = state.workspace.join(line.trim_end_matches('/'));
            collect_files(&path, &mut files);
        }
        files.retain(|file| !excluded.iter().any(|excluded| file.starts_with(excluded)));
        if files.is_empty() {
            return match with.get("if-no-files-found").map(as_string).as_deref() {
                Some("error") => Err(format!("no files for the artifact {name}")),
                _ => Ok(Map::new()),
            };
        }
        let roots: Vec<PathBuf> = lines
            .iter()
            .filter(|line| !line.starts_with('!'))
            .map(|line| {
                let path = state.workspace.join(line.trim_end_matches('/'));
                if path.is_dir() {
                    path
                } else {
                    path.parent().unwrap().to_owned()
                }
            })
            .collect();
        let mut common = roots[0].clone();
        for root in &roots[1..] {
            while !root.starts_with(&common) {
                common = common.parent().unwrap().to_owned();
            }
        }
        for file in files {
            let destination = target.join(file.strip_prefix(&common).unwrap());
            std::fs::create_dir_all(destination.parent().unwrap()).unwrap();
            std::fs::copy(&file, destination).unwrap();
        }
        Ok(Map::new())
    }

    /// download-artifact@v4: one artifact by `name` into `path`, or every
    /// artifact (matching `pattern`) each into `path/<name>`.
    fn download(&self, state: &JobState, with: &Map<String, Value>) {
        let path = state
            .workspace
            .join(with.get("path").map(as_string).unwrap_or_default());
        let names: Vec<String> = std::fs::read_dir(self.artifacts)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        if let Some(name) = with.get("name") {
            copy_tree(&self.artifacts.join(as_string(name)), &path);
            return;
        }
        let pattern = with.get("pattern").map(as_string);
        for name in names {
            if let Some(pattern) = &pattern {
                let prefix = pattern.trim_end_matches('*');
                if !name.starts_with(prefix) {
                    continue;
                }
            }
            copy_tree(&self.artifacts.join(&name), &path.join(&name));
        }
    }
}

fn collect_files(path: &Path, files: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            collect_files(&entry.unwrap().path(), files);
        }
    } else if path.is_file() {
        files.push(path.to_owned());
    }
}

/// `GITHUB_OUTPUT` and `GITHUB_ENV`: `name=value` lines and
/// `name<<DELIMITER` blocks.
fn key_values(text: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some((key, delimiter)) = line.split_once("<<") {
            let mut value = Vec::new();
            for line in lines.by_ref() {
                if line == delimiter {
                    break;
                }
                value.push(line);
            }
            pairs.push((key.to_owned(), value.join("\n")));
        } else if let Some((key, value)) = line.split_once('=') {
            pairs.push((key.to_owned(), value.to_owned()));
        }
    }
    pairs
}

/// `git` in `directory`, as a committer of the test's own; its standard
/// output, the test failing with git's error.
pub fn git(directory: &Path, arguments: &[&str]) -> String {
    let output = Command::new("git")
        .args(["-c", "user.name=team", "-c", "user.email=team@example.com"])
        .args(arguments)
        .current_dir(directory)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {arguments:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The YAML document as JSON values.
pub fn yaml(text: &str) -> Value {
    yaml_documents(text).swap_remove(0)
}

/// Each document of a YAML stream (`---` between them) as JSON values.
pub fn yaml_documents(text: &str) -> Vec<Value> {
    yaml_rust2::YamlLoader::load_from_str(text)
        .unwrap()
        .iter()
        .map(to_json)
        .collect()
}

fn to_json(yaml: &yaml_rust2::Yaml) -> Value {
    use yaml_rust2::Yaml;
    match yaml {
        Yaml::Real(text) => json!(text.parse::<f64>().unwrap()),
        Yaml::Integer(number) => json!(number),
        Yaml::String(text) => json!(text),
        Yaml::Boolean(flag) => json!(flag),
        Yaml::Array(items) => Value::Array(items.iter().map(to_json).collect()),
        Yaml::Hash(map) => Value::Object(
            map.iter()
                .map(|(key, value)| (as_string(&to_json(key)), to_json(value)))
                .collect(),
        ),
        Yaml::Null => Value::Null,
        other => panic!("unexpected YAML {other:?}"),
    }
}
