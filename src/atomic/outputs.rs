//! The one rule for every output, applied before a command writes anything:
//! an existing file is replaced only when it is routeval's own output of
//! the same kind; a signed config, a signature and a run's files never are;
//! a destination that is not a regular file or that is also an input is
//! refused.

use std::fs::File;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Why an output path was refused.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error(
        "{}: the name says {format}, but {kind} is a Parquet table; name it .parquet ({flag})",
        path.display()
    )]
    WrongFormat {
        path: PathBuf,
        format: String,
        kind: &'static str,
        flag: String,
    },
    #[error(
        "{}: is {what}, not a regular file; routeval writes only regular files ({flag})",
        path.display()
    )]
    NotRegular {
        path: PathBuf,
        what: &'static str,
        flag: String,
    },
    #[error(
        "{}: is also an input ({input_flag}); write the output to another path ({flag})",
        path.display()
    )]
    SameAsInput {
        path: PathBuf,
        flag: String,
        input_flag: String,
    },
    #[error(
        "{}: exists and is not {kind} routeval wrote; routeval replaces only its own output of the same kind: remove it or write to another path ({flag})",
        path.display()
    )]
    NotOurs {
        path: PathBuf,
        kind: &'static str,
        flag: String,
    },
    #[error(
        "{}: exists; {kind} is always a new file, never a replacement: remove it or write to another path ({flag})",
        path.display()
    )]
    Exists {
        path: PathBuf,
        kind: &'static str,
        flag: String,
    },
    #[error(
        "{}: is {what}; signed route configs and their signatures are never replaced ({flag})",
        path.display()
    )]
    Signed {
        path: PathBuf,
        what: &'static str,
        flag: String,
    },
    #[error(
        "{}: belongs to the run in {}; only `routeval run` writes a run's files: write to another path ({flag})",
        path.display(),
        run.display()
    )]
    InRun {
        path: PathBuf,
        run: PathBuf,
        flag: String,
    },
    #[error("{}: named as two outputs ({first} and {second})", path.display())]
    Twice {
        path: PathBuf,
        first: String,
        second: String,
    },
    #[error("{}: cannot inspect: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A path a command reads or writes, with the flag that named it.
#[derive(Debug, Clone, Copy)]
pub struct Named<'a> {
    pub path: &'a Path,
    pub flag: &'a str,
}

impl<'a> Named<'a> {
    pub fn new(path: &'a Path, flag: &'a str) -> Named<'a> {
        Named { path, flag }
    }
}

/// What a command writes at one path, and so what an existing file there must
/// be for the command to replace it.
#[derive(Debug, Clone, Copy)]
pub struct OutputKind {
    /// "a calibration document": what the refusal calls it.
    pub name: &'static str,
    pub replaces: Replaces,
}

/// How routeval recognises its own output of one kind.
#[derive(Debug, Clone, Copy)]
pub enum Replaces {
    /// Nothing: the output is always a new file (a key, a signed config, a
    /// route table written beside the one it came from).
    Nothing,
    /// A Parquet table whose footer carries this key-value metadata key.
    Table(&'static str),
    /// A JSON object with every one of these top-level keys and, when
    /// given, a `kind` of this value.
    Document {
        keys: &'static [&'static str],
        kind: Option<&'static str>,
    },
    /// JSON lines whose first line is an object with these keys.
    Lines(&'static [&'static str]),
    /// A file that begins with these bytes (a magic number, a marker line).
    Prefix(&'static [u8]),
    /// A file that begins with `start` and holds `needle` in its first
    /// 64 KiB: how outputs of earlier versions, written before their marker,
    /// are known.
    Holding {
        start: &'static [u8],
        needle: &'static [u8],
    },
    /// Any of these.
    AnyOf(&'static [Replaces]),
    /// What the writer has itself recognised as its own unfinished output:
    /// the signature and export a gate killed before its config landed
    /// leaves behind, which sign and describe nothing.
    Unfinished,
}

impl OutputKind {
    pub const fn new(name: &'static str, replaces: Replaces) -> OutputKind {
        OutputKind { name, replaces }
    }

    /// Whether the existing file at `path` is this kind of routeval output.
    pub fn recognises(&self, path: &Path) -> bool {
        self.replaces.recognises(path)
    }
}

impl Replaces {
    fn recognises(&self, path: &Path) -> bool {
        match *self {
            Replaces::Nothing => false,
            Replaces::Unfinished => true,
            Replaces::Table(key) => parquet_metadata_has(path, key),
            Replaces::Document { keys, kind } => {
                read_json_object(path).is_some_and(|object| has_keys(&object, keys, kind))
            }
            Replaces::Lines(keys) => first_line(path)
                .and_then(|line| serde_json::from_str(&line).ok())
                .is_some_and(|object| has_keys(&object, keys, None)),
            Replaces::Prefix(prefix) => starts_with(path, prefix),
            Replaces::Holding { start, needle } => {
                starts_with(path, start)
                    && head(path, 64 * 1024).is_some_and(|head| {
                        head.windows(needle.len()).any(|window| window == needle)
                    })
            }
            Replaces::AnyOf(kinds) => kinds.iter().any(|kind| kind.recognises(path)),
        }
    }
}

/// An output of a command: where, under which flag, and of what kind.
#[derive(Debug, Clone, Copy)]
pub struct Output<'a> {
    pub path: &'a Path,
    pub flag: &'a str,
    pub kind: &'a OutputKind,
}

impl<'a> Output<'a> {
    pub fn new(path: &'a Path, flag: &'a str, kind: &'a OutputKind) -> Output<'a> {
        Output { path, flag, kind }
    }
}

/// The layout of a run directory (`routeval run --out`): its manifest and
/// the names beside it that only `run` writes. Defined here, where outputs
/// are checked, so that the writer and the guard read one list.
pub mod run_directory {
    pub const MANIFEST: &str = "manifest.json";
    pub const RESPONSES: &str = "responses.parquet";
    pub const JOURNAL: &str = "journal";
    pub const PARTS: &str = "parts";
    pub const QUARANTINE: &str = "quarantine";
    pub const LOCK: &str = ".lock";
    /// Every name `run` keeps at the top of its directory.
    pub const NAMES: [&str; 6] = [MANIFEST, RESPONSES, JOURNAL, PARTS, QUARANTINE, LOCK];
    /// The keys every run manifest has had, from version 1.
    pub const MANIFEST_KEYS: &[&str] = &[
        "schema_version",
        "routeval_version",
        "dataset",
        "config",
        "prompts",
        "tiers",
    ];
}

/// Whether `directory` holds a run: a `manifest.json` with a run
/// manifest's keys.
pub fn is_run_directory(directory: &Path) -> bool {
    let manifest = directory.join(run_directory::MANIFEST);
    std::fs::symlink_metadata(&manifest).is_ok_and(|metadata| metadata.is_file())
        && read_json_object(&manifest)
            .is_some_and(|object| has_keys(&object, run_directory::MANIFEST_KEYS, None))
}

/// The run directory `path` (an output, existing or not) would be written
/// into: its directory when that is a run and the name is one of the run's,
/// or any directory above it that is a run.
fn run_holding(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?;
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    // The nearest directory that exists stands for the parent: an output in
    // a run's new subdirectory is still in the run.
    let mut existing = parent.to_owned();
    let mut below_parent = false;
    let canonical = loop {
        match std::fs::canonicalize(&existing) {
            Ok(canonical) => break canonical,
            Err(_) => {
                below_parent = true;
                existing = existing.parent()?.to_owned();
                if existing.as_os_str().is_empty() {
                    existing = PathBuf::from(".");
                }
            }
        }
    };
    if !below_parent
        && run_directory::NAMES.iter().any(|own| name == *own)
        && is_run_directory(&canonical)
    {
        return Some(canonical);
    }
    let mut above = if below_parent {
        Some(canonical.as_path())
    } else {
        canonical.parent()
    };
    while let Some(directory) = above {
        if is_run_directory(directory) {
            return Some(directory.to_owned());
        }
        above = directory.parent();
    }
    None
}

fn has_keys(
    object: &serde_json::Map<String, serde_json::Value>,
    keys: &[&str],
    kind: Option<&str>,
) -> bool {
    keys.iter().all(|key| object.contains_key(*key))
        && kind.is_none_or(|kind| object.get("kind").and_then(|value| value.as_str()) == Some(kind))
}

fn read_json_object(path: &Path) -> Option<serde_json::Map<String, serde_json::Value>> {
    let file = File::open(path).ok()?;
    serde_json::from_reader(std::io::BufReader::new(file)).ok()
}

fn first_line(path: &Path) -> Option<String> {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(File::open(path).ok()?)
        .read_line(&mut line)
        .ok()?;
    Some(line)
}

fn starts_with(path: &Path, prefix: &[u8]) -> bool {
    head(path, prefix.len()).is_some_and(|head| head == prefix)
}

/// The first `bytes` bytes of the file at `path` (fewer if it is shorter).
fn head(path: &Path, bytes: usize) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut head = Vec::with_capacity(bytes);
    File::open(path)
        .ok()?
        .take(bytes as u64)
        .read_to_end(&mut head)
        .ok()?;
    Some(head)
}

fn parquet_metadata_has(path: &Path, key: &str) -> bool {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let Ok(file) = File::open(path) else {
        return false;
    };
    let Ok(reader) = SerializedFileReader::new(file) else {
        return false;
    };
    reader
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .is_some_and(|pairs| pairs.iter().any(|pair| pair.key == key))
}

/// What a signature looks like from its first bytes: minisign's first line.
const SIGNATURE_PREFIX: &[u8] = b"untrusted comment:";

/// Refuses to replace a signed config or a signature, whatever the kind of
/// the output: a file with a `.minisig` beside it, or one that is a
/// signature by its name or first line.
fn check_not_signed(output: &Output<'_>) -> Result<(), OutputError> {
    let refuse = |what: &'static str| OutputError::Signed {
        path: output.path.to_owned(),
        what,
        flag: output.flag.to_owned(),
    };
    let name = output
        .path
        .file_name()
        .unwrap_or_default()
        .to_string_lossy();
    if name.ends_with(".minisig") || starts_with(output.path, SIGNATURE_PREFIX) {
        return Err(refuse("a signature"));
    }
    let mut signature = output.path.as_os_str().to_owned();
    signature.push(".minisig");
    if std::fs::symlink_metadata(PathBuf::from(signature)).is_ok() {
        return Err(refuse("a signed route config (its .minisig is beside it)"));
    }
    Ok(())
}

/// A Parquet table's output refused where its name says another format
/// (`s.csv`): what a reader would take it for is not what it holds.
fn check_format(output: &Output<'_>) -> Result<(), OutputError> {
    let Replaces::Table(_) = output.kind.replaces else {
        return Ok(());
    };
    let extension = output
        .path
        .extension()
        .and_then(|extension| extension.to_str())
        .map(str::to_ascii_lowercase);
    match extension.as_deref() {
        Some(format @ ("csv" | "tsv" | "json" | "jsonl" | "ndjson" | "txt")) => {
            Err(OutputError::WrongFormat {
                path: output.path.to_owned(),
                format: format!(".{format}"),
                kind: output.kind.name,
                flag: output.flag.to_owned(),
            })
        }
        _ => Ok(()),
    }
}

/// What kind of thing sits at `path`, without following a final symbolic
/// link; `None` when nothing does.
fn kind_at(path: &Path) -> Result<Option<(&'static str, std::fs::Metadata)>, OutputError> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(OutputError::Io {
                path: path.to_owned(),
                source,
            });
        }
    };
    let kind = metadata.file_type();
    let what = if kind.is_file() {
        "a regular file"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    Ok(Some((what, metadata)))
}

/// Refuses a destination that exists and is not a regular file.
pub fn check_destination(path: &Path, flag: &str) -> Result<(), OutputError> {
    match kind_at(path)? {
        Some((what, metadata)) if !metadata.file_type().is_file() => Err(OutputError::NotRegular {
            path: path.to_owned(),
            what,
            flag: flag.to_owned(),
        }),
        _ => Ok(()),
    }
}

/// Checks every output of a command before it writes any: each must be
/// absent or a regular file; an existing one must be routeval's own output of
/// the output's kind and neither a signed config nor a signature; none may be
/// a run's file (unless `run` itself writes it), the same file as an input
/// (by device and inode, so another spelling of the path is caught too), or
/// the same file as another output.
pub fn check_outputs(outputs: &[Output<'_>], inputs: &[Named<'_>]) -> Result<(), OutputError> {
    let identity = |path: &Path| -> Option<(u64, u64)> {
        std::fs::metadata(path)
            .ok()
            .map(|metadata| (metadata.dev(), metadata.ino()))
    };
    let inputs: Vec<(Option<(u64, u64)>, &Named<'_>)> = inputs
        .iter()
        .map(|input| (identity(input.path), input))
        .collect();
    for (index, output) in outputs.iter().enumerate() {
        check_destination(output.path, output.flag)?;
        // `b.toml` and `./b.toml`, or a path through a link, are one file
        // even before it exists.
        let resolved_output = resolved(output.path);
        let same_path = |other: &Path| {
            other == output.path
                || resolved_output.as_ref().is_some_and(|resolved_output| {
                    resolved(other).as_ref() == Some(resolved_output)
                })
        };
        if let Some(earlier) = outputs[..index]
            .iter()
            .find(|earlier| same_path(earlier.path))
        {
            return Err(OutputError::Twice {
                path: output.path.to_owned(),
                first: earlier.flag.to_owned(),
                second: output.flag.to_owned(),
            });
        }
        let here = identity(output.path);
        for (identity, input) in &inputs {
            let same = same_path(input.path) || (here.is_some() && here == *identity);
            if same {
                return Err(OutputError::SameAsInput {
                    path: output.path.to_owned(),
                    flag: output.flag.to_owned(),
                    input_flag: input.flag.to_owned(),
                });
            }
        }
        if let Some(run) = run_holding(output.path) {
            return Err(OutputError::InRun {
                path: output.path.to_owned(),
                run,
                flag: output.flag.to_owned(),
            });
        }
        if here.is_some() {
            check_replaceable(output)?;
        }
        // Last: a file that is an input, a run's or not routeval's is
        // refused for that first, whatever its name says.
        check_format(output)?;
    }
    Ok(())
}

/// The rule for an output whose file exists.
fn check_replaceable(output: &Output<'_>) -> Result<(), OutputError> {
    if matches!(output.kind.replaces, Replaces::Unfinished) {
        return Ok(());
    }
    check_not_signed(output)?;
    if matches!(output.kind.replaces, Replaces::Nothing) {
        return Err(OutputError::Exists {
            path: output.path.to_owned(),
            kind: output.kind.name,
            flag: output.flag.to_owned(),
        });
    }
    if !output.kind.recognises(output.path) {
        return Err(OutputError::NotOurs {
            path: output.path.to_owned(),
            kind: output.kind.name,
            flag: output.flag.to_owned(),
        });
    }
    Ok(())
}

/// `path` with its directory resolved (absolute, links followed) and its
/// own name kept, so two spellings of one destination compare equal whether
/// or not the file exists yet; `None` where the directory does not exist.
fn resolved(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?;
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    Some(std::fs::canonicalize(parent).ok()?.join(name))
}
