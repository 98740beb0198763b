//! Signed route configs: tampering, replay and expiry are caught, each with
//! its own message; keys stay secret; and routeval and the minisign command
//! verify each other's signatures.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use routeval::clock::{FixedClock, parse_rfc3339};
use routeval::routes::{SignatureError, VerifyError, check_config, load_public, signature_path};

use crate::common::{Random, routeval};
use crate::common::{Workspace, example_routes};

/// A workspace with an emitted v1 (always-large) and v2 (predictive) config.
fn signed_configs() -> (Workspace, String, String) {
    let workspace = Workspace::new();
    workspace
        .gate(
            &[example_routes("always-large.toml")],
            "v1",
            &["--target", "0.9"],
        )
        .code(0);
    let v1 = workspace.report("v1").emitted.unwrap().config;
    workspace
        .gate(
            &[example_routes("predictive.toml")],
            "v2",
            &[
                "--target",
                "0.9",
                "--max-regression",
                "0.2",
                "--baseline",
                &v1,
            ],
        )
        .code(0);
    let v2 = workspace.report("v2").emitted.unwrap().config;
    (workspace, v1, v2)
}

fn read(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

fn signature(config: &str) -> String {
    std::fs::read_to_string(signature_path(Path::new(config))).unwrap()
}

const DURING: FixedClock = FixedClock(1_796_000_000); // 2026-11-30

#[test]
fn every_single_byte_change_fails_verification() {
    let (workspace, v1, v2) = signed_configs();
    let public = load_public(workspace.path("routeval.key.pub").to_str().unwrap()).unwrap();
    let (config, signature) = (read(&v2), signature(&v2));
    let previous = read(&v1);
    let previous_signature = self::signature(&v1);
    let previous = Some((previous.as_slice(), previous_signature.as_str()));
    assert!(check_config(&config, &signature, &public, previous, &DURING).is_ok());

    let mut random = Random::new(7);
    for _ in 0..400 {
        let mut tampered = config.clone();
        let position = (random.next_u64() % tampered.len() as u64) as usize;
        tampered[position] ^= 1 + (random.next_u64() % 255) as u8;
        assert!(
            check_config(&tampered, &signature, &public, previous, &DURING).is_err(),
            "config byte {position} changed and still verified"
        );
    }
    // The first line of a minisign signature is, by the format's design, an
    // untrusted free-text comment; every other byte is authenticated.
    let authenticated = signature.find('\n').unwrap() + 1;
    let bytes = signature.as_bytes();
    let mut random = Random::new(8);
    for _ in 0..400 {
        let mut tampered = bytes.to_vec();
        let position =
            authenticated + (random.next_u64() % (bytes.len() - authenticated) as u64) as usize;
        tampered[position] ^= 1 + (random.next_u64() % 127) as u8;
        let tampered = String::from_utf8_lossy(&tampered).into_owned();
        assert!(
            check_config(&config, &tampered, &public, previous, &DURING).is_err(),
            "signature byte {position} changed and still verified"
        );
    }
}

#[test]
fn replays_wrong_parents_expiry_and_wrong_keys_each_fail_distinctly() {
    let (workspace, v1, v2) = signed_configs();
    let public = load_public(workspace.path("routeval.key.pub").to_str().unwrap()).unwrap();
    let (config, signature) = (read(&v2), signature(&v2));

    let lower = check_config(
        &read(&v1),
        &self::signature(&v1),
        &public,
        Some((&config, &signature)),
        &DURING,
    )
    .unwrap_err();
    assert_eq!(
        lower,
        VerifyError::VersionNotIncreasing {
            version: 1,
            previous: 2
        }
    );

    // A previous config edited, or signed by another key, is no previous
    // config: the chain is only as good as its oldest link.
    let (v1_bytes, v1_signature) = (read(&v1), self::signature(&v1));
    let mut forged = v1_bytes.clone();
    forged.extend_from_slice(b" ");
    let refused = check_config(
        &config,
        &signature,
        &public,
        Some((&forged, &v1_signature)),
        &DURING,
    )
    .unwrap_err();
    assert!(
        matches!(&refused, VerifyError::Previous(inner) if matches!(**inner, VerifyError::Signature(_))),
        "{refused}"
    );
    // A signed config that is not the parent.
    workspace
        .gate(
            &[example_routes("always-large.toml")],
            "v1-again",
            &["--target", "0.9", "--ttl-days", "31"],
        )
        .code(0);
    let again = workspace.report("v1-again").emitted.unwrap().config;
    let parent = check_config(
        &config,
        &signature,
        &public,
        Some((&read(&again), &self::signature(&again))),
        &DURING,
    )
    .unwrap_err();
    assert!(
        matches!(parent, VerifyError::ParentMismatch { .. }),
        "{parent}"
    );

    let after_expiry = FixedClock(parse_rfc3339("2027-01-01T00:00:00Z").unwrap());
    let expired = check_config(
        &config,
        &signature,
        &public,
        Some((&v1_bytes, &v1_signature)),
        &after_expiry,
    )
    .unwrap_err();
    assert!(matches!(expired, VerifyError::Expired { .. }), "{expired}");

    routeval()
        .args(["keygen", "--out"])
        .arg(workspace.path("other.key"))
        .assert()
        .code(0);
    let other = load_public(workspace.path("other.key.pub").to_str().unwrap()).unwrap();
    let wrong_key = check_config(&config, &signature, &other, None, &DURING).unwrap_err();
    assert!(
        matches!(
            wrong_key,
            VerifyError::Signature(SignatureError::Invalid(_))
        ),
        "{wrong_key}"
    );

    let messages: Vec<String> = [lower, parent, expired, wrong_key]
        .iter()
        .map(ToString::to_string)
        .collect();
    for (index, message) in messages.iter().enumerate() {
        assert!(!messages[..index].contains(message));
    }

    // The CLI reports a failed check with exit code 1 and one line.
    let output = routeval()
        .arg("verify")
        .arg(&v2)
        .arg("--pubkey")
        .arg(workspace.path("routeval.key.pub"))
        .args(["--at", "2027-01-01T00:00:00Z"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1);
    assert!(stderr.contains("expired at"), "{stderr}");
}

#[test]
fn keygen_protects_the_secret_key_and_nothing_prints_it() {
    let workspace = Workspace::new();
    let secret_path = workspace.path("routeval.key");
    let mode = std::fs::metadata(&secret_path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    let secret_text = std::fs::read_to_string(&secret_path).unwrap();
    let secret_material = secret_text.lines().nth(1).unwrap().to_owned();
    assert!(secret_material.len() > 100);

    let keygen = routeval()
        .args(["keygen", "--out"])
        .arg(&secret_path)
        .output()
        .unwrap();
    assert_eq!(
        keygen.status.code(),
        Some(2),
        "an existing key is never overwritten"
    );
    assert_eq!(std::fs::read_to_string(&secret_path).unwrap(), secret_text);

    let gate = workspace
        .gate(
            &[example_routes("predictive.toml")],
            "dist",
            &["--target", "0.9", "--json"],
        )
        .code(0)
        .get_output()
        .clone();
    let mut outputs = vec![gate.stdout, gate.stderr, keygen.stdout, keygen.stderr];
    for entry in std::fs::read_dir(workspace.path("dist")).unwrap() {
        outputs.push(std::fs::read(entry.unwrap().path()).unwrap());
    }
    for output in outputs {
        assert!(!String::from_utf8_lossy(&output).contains(&secret_material));
    }
}

/// The Debian `minisign` command, or `None` after saying the test is skipped.
/// `.ci/run` installs it, so CI never skips.
fn minisign() -> Option<()> {
    let found = Command::new("minisign")
        .arg("-v")
        .output()
        .is_ok_and(|output| output.status.success());
    if !found && std::env::var_os("CI").is_some() {
        panic!("minisign is not installed; .ci/run installs it");
    }
    if !found {
        eprintln!("skipped: the minisign command is not installed (apt-get install minisign)");
    }
    found.then_some(())
}

#[test]
fn the_minisign_command_verifies_routeval_signatures() {
    let Some(()) = minisign() else { return };
    let (workspace, _, v2) = signed_configs();
    let output = Command::new("minisign")
        .args(["-V", "-m", &v2, "-p"])
        .arg(workspace.path("routeval.key.pub"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("Trusted comment: routeval config_id:")
    );
    // -H: minisign requires the prehashed algorithm routeval uses.
    let prehashed = Command::new("minisign")
        .args(["-V", "-H", "-m", &v2, "-p"])
        .arg(workspace.path("routeval.key.pub"))
        .status()
        .unwrap();
    assert!(prehashed.success());
}

#[test]
fn routeval_verifies_minisign_signatures_and_refuses_legacy_ones() {
    let Some(()) = minisign() else { return };
    let (workspace, _, v2) = signed_configs();
    let secret = workspace.path("minisign.key");
    let public = workspace.path("minisign.pub");
    let generated = Command::new("minisign")
        .args(["-G", "-W", "-s"])
        .arg(&secret)
        .arg("-p")
        .arg(&public)
        .output()
        .unwrap();
    assert!(
        generated.status.success(),
        "{}",
        String::from_utf8_lossy(&generated.stderr)
    );

    // Re-sign routeval's config with the minisign command, same trusted comment.
    let config = workspace.path("route-config.json");
    std::fs::copy(&v2, &config).unwrap();
    let comment = signature(&v2)
        .lines()
        .nth(2)
        .unwrap()
        .strip_prefix("trusted comment: ")
        .unwrap()
        .to_owned();
    let sign = |legacy: bool| {
        let mut command = Command::new("minisign");
        command.arg("-S");
        if legacy {
            command.arg("-l");
        }
        let status = command
            .arg("-s")
            .arg(&secret)
            .arg("-t")
            .arg(&comment)
            .arg("-m")
            .arg(&config)
            .output()
            .unwrap();
        assert!(
            status.status.success(),
            "{}",
            String::from_utf8_lossy(&status.stderr)
        );
    };
    let verify = || {
        routeval()
            .arg("verify")
            .arg(&config)
            .arg("--pubkey")
            .arg(&public)
            .args(["--at", "2026-11-30T00:00:00Z"])
            .output()
            .unwrap()
    };
    sign(false);
    let accepted = verify();
    assert_eq!(
        accepted.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&accepted.stderr)
    );

    sign(true);
    let refused = verify();
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("legacy (non-prehashed) signatures are refused")
    );
}
