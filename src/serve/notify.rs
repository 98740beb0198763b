//! systemd's service notification protocol (`sd_notify`), for a unit of
//! `Type=notify`: `READY=1` once serve listens with its config loaded, so
//! `systemctl start` and units ordered after it wait for a serve that
//! answers; the running config in `STATUS=`, again after each reload; and
//! `STOPPING=1` when it starts to drain. Without `NOTIFY_SOCKET` (not
//! started by systemd) nothing is sent. A notification that cannot be sent
//! costs serve nothing: systemd then treats serve as its unit's settings
//! say (a `Type=notify` start that never hears `READY=1` times out).

use std::os::unix::net::UnixDatagram;

use super::deployed::Deployed;

/// What systemd shows for serve (`systemctl status`): the config it serves.
pub fn serving_status(deployed: &Deployed) -> String {
    format!(
        "serving {} ({} version {})",
        deployed.config.table.logical_model, deployed.config.config_id, deployed.config.version
    )
}

/// Where systemd listens for this service's notifications.
#[derive(Debug, Clone)]
pub struct Notifier {
    socket: Option<String>,
}

impl Notifier {
    /// The socket `NOTIFY_SOCKET` names (a path, or `@name` in the
    /// abstract namespace), if any.
    pub fn from_environment() -> Notifier {
        Notifier {
            socket: std::env::var("NOTIFY_SOCKET")
                .ok()
                .filter(|socket| !socket.is_empty()),
        }
    }

    /// Serve listens with `status` loaded.
    pub fn ready(&self, status: &str) {
        self.send(&format!(
            "READY=1\nMAINPID={}\nSTATUS={status}\n",
            std::process::id()
        ));
    }

    /// What serve now runs, after a reload.
    pub fn status(&self, status: &str) {
        self.send(&format!("STATUS={status}\n"));
    }

    /// Serve takes no new connections and answers the ones it has.
    pub fn stopping(&self) {
        self.send("STOPPING=1\nSTATUS=draining: no new connections\n");
    }

    fn send(&self, message: &str) {
        let Some(socket) = &self.socket else {
            return;
        };
        let Ok(sender) = UnixDatagram::unbound() else {
            return;
        };
        // Best effort: a notification that does not reach systemd changes
        // nothing serve does.
        let _ = match socket.strip_prefix('@') {
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
                    .and_then(|address| sender.send_to_addr(message.as_bytes(), &address))
            }
            None => sender.send_to(message.as_bytes(), socket),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_reach_a_path_socket_and_an_abstract_one() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        let notifier = Notifier {
            socket: Some(path.display().to_string()),
        };
        notifier.ready("support-assistant version 3");
        let mut buffer = [0u8; 512];
        let read = listener.recv(&mut buffer).unwrap();
        let message = std::str::from_utf8(&buffer[..read]).unwrap();
        assert!(message.starts_with("READY=1\n"), "{message}");
        assert!(message.contains(&format!("MAINPID={}\n", std::process::id())));
        assert!(message.contains("STATUS=support-assistant version 3\n"));

        use std::os::linux::net::SocketAddrExt;
        let name = format!("routeval-notify-test-{}", std::process::id());
        let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let abstract_listener = UnixDatagram::bind_addr(&address).unwrap();
        Notifier {
            socket: Some(format!("@{name}")),
        }
        .stopping();
        let read = abstract_listener.recv(&mut buffer).unwrap();
        assert!(
            std::str::from_utf8(&buffer[..read])
                .unwrap()
                .starts_with("STOPPING=1\n")
        );
    }

    #[test]
    fn without_a_socket_nothing_is_sent_and_nothing_fails() {
        Notifier { socket: None }.ready("anything");
        Notifier {
            socket: Some("/nonexistent/notify".to_owned()),
        }
        .stopping();
    }
}
