//! The `leasehold` binary: see `leasehold --help`.

fn main() -> std::process::ExitCode {
    leasehold::cli::main()
}
