//! The Python client (`clients/python`), installed with pip into a fresh virtual environment and
//! run by its own pytest suite against real clusters of this build's binary. What a Python user
//! does, in the order they do it: `python3 -m venv`, `pip install ./clients/python`, import.

use std::path::{Path, PathBuf};
use std::process::Command;

fn run(what: &str, command: &mut Command) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{what}: could not start {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn python3() -> &'static str {
    let found = Command::new("python3").arg("--version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "the Python client's tests need python3 (3.9 or later) with its venv module on PATH"
    );
    "python3"
}

#[test]
fn the_python_client_installs_into_a_fresh_venv_and_passes_its_suite() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let package = repo.join("clients").join("python");
    let venv = tempfile::tempdir().unwrap();
    let bin = |name: &str| -> PathBuf { venv.path().join("bin").join(name) };
    run(
        "python3 -m venv",
        Command::new(python3())
            .args(["-m", "venv"])
            .arg(venv.path()),
    );
    run(
        "pip install ./clients/python[test]",
        Command::new(bin("pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .arg(format!("{}[test]", package.display())),
    );
    // The installed package, not the source tree, is what the suite imports.
    run(
        "the installed package imports with its stubs and type markers",
        Command::new(bin("python"))
            .current_dir(venv.path())
            .args([
                "-c",
                "import importlib.resources as r, leasehold, leasehold.aio, leasehold.v1.leasehold_pb2_grpc; \
                 assert r.files('leasehold').joinpath('py.typed').is_file(); \
                 assert r.files('leasehold.v1').joinpath('leasehold_pb2.pyi').is_file()",
            ]),
    );
    run(
        "pytest clients/python/tests",
        Command::new(bin("python"))
            .current_dir(&package)
            .args(["-m", "pytest", "-q", "-s", "-p", "no:cacheprovider"])
            .env("LEASEHOLD_BIN", env!("CARGO_BIN_EXE_leasehold"))
            .env("PYTHONDONTWRITEBYTECODE", "1"),
    );
}
