//! podman as the tests drive it: `integration/container/podman.sh` (the runc runtime, the
//! cgroupfs manager) with a `containers.conf` of the test's own, the stand-in bases, the
//! image built from the repository's Dockerfile, and a container removed on drop.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use gcounter_rls_integration::process::describe;
use gcounter_rls_integration::repo_path;

/// The image the suite builds, and the one `deploy/kubernetes/` names (podman stores a
/// name without a registry under `localhost/`).
pub const IMAGE: &str = "gcounter-rls:dev";

/// How `.ci/run` installs what is missing, for the failure messages.
const INSTALL: &str = "apt-get install podman runc buildah debootstrap (.ci/run installs them)";

/// podman with this project's settings; `containers.conf` is the test's own, whose
/// `default_ulimits` is empty (raising the default open-files limit is not permitted here).
pub struct Podman {
    _conf_dir: tempfile::TempDir,
    conf: PathBuf,
}

impl Podman {
    /// Fails, saying how to install them, when podman or debootstrap is missing.
    pub fn new() -> Podman {
        for tool in ["podman", "runc", "debootstrap"] {
            let found = Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            assert!(found, "{tool} is missing: {INSTALL}");
        }
        let conf_dir = tempfile::tempdir().expect("create a dir for containers.conf");
        let conf = conf_dir.path().join("containers.conf");
        std::fs::write(&conf, "[containers]\ndefault_ulimits = []\n")
            .expect("write containers.conf");
        Podman {
            _conf_dir: conf_dir,
            conf,
        }
    }

    /// A command running `script` (under `integration/container/`) with our containers.conf.
    fn script(&self, script: &str) -> Command {
        let mut command = Command::new("bash");
        command
            .arg(repo_path("integration/container").join(script))
            .env("CONTAINERS_CONF", &self.conf)
            .current_dir(repo_path(""))
            .stdin(Stdio::null());
        command
    }

    /// `podman args...`.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = self.script("podman.sh");
        command.args(args);
        command
    }

    /// Runs `podman args...`; its output, whether it succeeded or not.
    pub fn output(&self, args: &[&str]) -> Output {
        self.command(args)
            .output()
            .unwrap_or_else(|e| panic!("run podman {args:?}: {e}"))
    }

    /// Runs `podman args...`, which must succeed; its stdout, trimmed.
    pub fn ok(&self, args: &[&str]) -> String {
        let output = self.output(args);
        assert!(
            output.status.success(),
            "podman {args:?} failed\n{}",
            describe(&output)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    /// The stand-in bases (built once, then reused): (builder, runtime).
    pub fn stand_in_bases(&self) -> (String, String) {
        let output = self
            .script("stand-in-bases.sh")
            .output()
            .expect("run integration/container/stand-in-bases.sh");
        assert!(
            output.status.success(),
            "building the stand-in base images failed\n{}",
            describe(&output)
        );
        let text = String::from_utf8_lossy(&output.stdout);
        match text.lines().collect::<Vec<_>>().as_slice() {
            [builder, runtime] => (builder.to_string(), runtime.to_string()),
            _ => panic!("stand-in-bases.sh printed {text:?}, not two image names"),
        }
    }

    /// Builds [`IMAGE`] from the repository's Dockerfile on `bases`, never pulling; the
    /// commit passed in is `commit`. Cached by the Dockerfile's cache mounts: a rebuild
    /// compiles only what changed. No intermediate images are kept (`--layers=false`), and
    /// the image the new one replaces is removed, so reruns do not fill the disk. The time it
    /// took.
    pub fn build_image(&self, (builder, runtime): &(String, String), commit: &str) -> Duration {
        let started = Instant::now();
        let context = repo_path("");
        let previous = self.output(&["image", "inspect", "--format", "{{.Id}}", IMAGE]);
        let args = [
            "build".to_string(),
            "--pull=never".to_string(),
            "--layers=false".to_string(),
            "--build-arg".to_string(),
            format!("BUILDER_IMAGE={builder}"),
            "--build-arg".to_string(),
            format!("RUNTIME_IMAGE={runtime}"),
            "--build-arg".to_string(),
            format!("RLS_BUILD_COMMIT={commit}"),
            "--tag".to_string(),
            IMAGE.to_string(),
            "--file".to_string(),
            context.join("Dockerfile").to_string_lossy().into_owned(),
            context.to_string_lossy().into_owned(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = self.output(&args);
        assert!(
            output.status.success(),
            "podman build of the Dockerfile failed\n{}",
            describe(&output)
        );
        let took = started.elapsed();
        let previous = String::from_utf8_lossy(&previous.stdout).trim().to_string();
        let current = self.ok(&["image", "inspect", "--format", "{{.Id}}", IMAGE]);
        if !previous.is_empty() && previous != current {
            // Still used by another tag (a release's), or by a container: then it stays.
            let _ = self.output(&["rmi", &previous]);
        }
        took
    }
}

/// The repository's commit, as the release passes it to the build.
pub fn short_commit() -> String {
    let output = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(repo_path(""))
        .output()
        .expect("run git rev-parse");
    assert!(
        output.status.success(),
        "git rev-parse\n{}",
        describe(&output)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// A started container, removed (forcibly) on drop.
pub struct Container<'p> {
    podman: &'p Podman,
    pub name: String,
}

impl<'p> Container<'p> {
    /// `podman run --detach --name <unique> args...`.
    pub fn run(podman: &'p Podman, args: &[&str]) -> Container<'p> {
        let name = format!("gcounter-rls-test-{}", std::process::id());
        // A container left by a killed run of this process id would hold the name.
        let _ = podman.output(&["rm", "--force", &name]);
        let mut all = vec!["run", "--detach", "--name", &name];
        all.extend_from_slice(args);
        podman.ok(&all);
        Container { podman, name }
    }

    /// Everything the container wrote, for failure messages.
    pub fn logs(&self) -> String {
        let output = self.podman.output(&["logs", &self.name]);
        format!(
            "--- container log ---\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    }

    /// `podman inspect --format <format>` of the container.
    pub fn inspect(&self, format: &str) -> String {
        self.podman.ok(&[
            "inspect",
            "--type",
            "container",
            "--format",
            format,
            &self.name,
        ])
    }

    /// The host's process id of the container's first process.
    pub fn pid(&self) -> u32 {
        let pid = self.inspect("{{.State.Pid}}");
        pid.parse()
            .unwrap_or_else(|e| panic!("container pid {pid:?}: {e}\n{}", self.logs()))
    }

    /// `podman stop --time grace`: SIGTERM, then SIGKILL past `grace`. The time it took
    /// and the exit code.
    pub fn stop(&self, grace: Duration) -> (Duration, i32) {
        let started = Instant::now();
        self.podman
            .ok(&["stop", "--time", &grace.as_secs().to_string(), &self.name]);
        let took = started.elapsed();
        let code = self.inspect("{{.State.ExitCode}}");
        let code = code
            .parse()
            .unwrap_or_else(|e| panic!("exit code {code:?}: {e}"));
        (took, code)
    }
}

impl Drop for Container<'_> {
    fn drop(&mut self) {
        let _ = self.podman.output(&["rm", "--force", &self.name]);
    }
}

/// A directory laid out as the kubelet mounts a ConfigMap: each version in a timestamped
/// directory, `..data` a symlink to the current one, each file a symlink through `..data`.
/// Readable by the container's user (65532).
pub struct ConfigMapVolume {
    dir: tempfile::TempDir,
    file: String,
    versions: u32,
}

impl ConfigMapVolume {
    pub fn new(file: &str, contents: &str) -> ConfigMapVolume {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("create the volume directory");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("open the volume directory to the container's user");
        let mut volume = ConfigMapVolume {
            dir,
            file: file.to_string(),
            versions: 0,
        };
        let first = volume.write_version(contents);
        std::os::unix::fs::symlink(&first, volume.path().join("..data")).expect("link ..data");
        std::os::unix::fs::symlink(format!("..data/{file}"), volume.path().join(file))
            .expect("link the file through ..data");
        volume
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    fn write_version(&mut self, contents: &str) -> String {
        use std::os::unix::fs::PermissionsExt;
        self.versions += 1;
        let name = format!(
            "..2026_01_01_00_00_{:02}.00000000{}",
            self.versions, self.versions
        );
        let version = self.path().join(&name);
        std::fs::create_dir(&version).expect("create a version directory");
        std::fs::set_permissions(&version, std::fs::Permissions::from_mode(0o755))
            .expect("open the version directory");
        let file = version.join(&self.file);
        std::fs::write(&file, contents).expect("write the file");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))
            .expect("open the file");
        name
    }

    /// The kubelet's update: a new version, `..data_tmp` renamed over `..data`, the old
    /// version removed.
    pub fn update(&mut self, contents: &str) {
        let old = std::fs::read_link(self.path().join("..data")).expect("read ..data");
        let new = self.write_version(contents);
        std::os::unix::fs::symlink(&new, self.path().join("..data_tmp")).expect("link ..data_tmp");
        std::fs::rename(self.path().join("..data_tmp"), self.path().join("..data"))
            .expect("swap ..data");
        std::fs::remove_dir_all(self.path().join(old)).expect("remove the old version");
    }
}
