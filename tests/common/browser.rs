//! Debian's Chromium, headless, as the report's browser tests drive it: a
//! screenshot of a page, and a page's DOM after its scripts ran.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Debian's Chromium, or `None` after saying the test is skipped. `.ci/run`
/// installs it, so CI never skips.
pub fn chromium() -> Option<PathBuf> {
    let path = Path::new("/usr/bin/chromium");
    if path.exists() {
        return Some(path.to_owned());
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "chromium is not installed; .ci/run installs it"
    );
    eprintln!("skipped: chromium is not installed (apt-get install chromium)");
    None
}

/// Chromium headless with a profile of its own under `profile`, and none of
/// the background connections this machine's closed network refuses.
pub fn headless(chromium: &Path, profile: &Path, width: u32, height: u32) -> Command {
    let mut command = Command::new(chromium);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--window-size={width},{height}"))
        .arg(format!("--user-data-dir={}", profile.display()));
    command
}

/// A screenshot of `page` in a window `width` × `height`: the PNG's path.
pub fn screenshot(chromium: &Path, page: &Path, width: u32, height: u32) -> PathBuf {
    let directory = page.parent().unwrap();
    let shot = directory.join(format!("screenshot-{width}.png"));
    let output = headless(
        chromium,
        &directory.join(format!("profile-{width}")),
        width,
        height,
    )
    .arg(format!("--screenshot={}", shot.display()))
    .arg(format!("file://{}", page.display()))
    .output()
    .unwrap();
    assert!(
        shot.exists(),
        "no screenshot: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    shot
}

/// What `script` left in `<pre id="measure">` of `page` loaded in an
/// iframe exactly `width` CSS pixels wide (a window cannot be made that
/// narrow), read from the DOM Chromium dumps after the page loaded.
/// `script` sees the frame as `frame` and says what it found with
/// `report(value)`.
pub fn measure_in_frame(
    chromium: &Path,
    page: &Path,
    width: u32,
    script: &str,
) -> serde_json::Value {
    let directory = page.parent().unwrap();
    let wrapper = directory.join(format!("frame-{width}.html"));
    std::fs::write(
        &wrapper,
        format!(
            "<!doctype html><html><body style=\"margin:0\"><iframe id=\"frame\" src=\"{}\" style=\"width:{width}px;height:1200px;border:0\"></iframe><script>\
             function report(value) {{ const pre = document.createElement('pre'); pre.id = 'measure'; pre.textContent = JSON.stringify(value); document.body.appendChild(pre); }}\
             window.addEventListener('load', () => {{ const frame = document.getElementById('frame'); {script} }});</script></body></html>",
            page.file_name().unwrap().to_string_lossy()
        ),
    )
    .unwrap();
    let output = headless(
        chromium,
        &directory.join(format!("profile-frame-{width}")),
        1600,
        1200,
    )
    .args([
        "--allow-file-access-from-files",
        "--virtual-time-budget=5000",
        "--dump-dom",
    ])
    .arg(format!("file://{}", wrapper.display()))
    .output()
    .unwrap();
    reported(&output)
}

/// What a page's script wrote as JSON into `<pre id="measure">`, read from
/// the DOM Chromium dumped (`--dump-dom`) into `output`.
pub fn reported(output: &std::process::Output) -> serde_json::Value {
    let dom = String::from_utf8_lossy(&output.stdout);
    let start = dom.find("<pre id=\"measure\">").unwrap_or_else(|| {
        panic!(
            "the page's script reported nothing: {dom}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    }) + "<pre id=\"measure\">".len();
    let end = start + dom[start..].find("</pre>").unwrap();
    let json = dom[start..end]
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    serde_json::from_str(&json).unwrap()
}
