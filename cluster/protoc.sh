#!/usr/bin/env bash
# Prints the path of a protoc for the builds that need one: the `etcd` feature's etcd-client
# crate compiles etcd's protos with the protoc that PROTOC names. It is protox's command line
# (pure Rust, from crates.io, not a system protoc), installed once under target/tools.
# Usage: PROTOC=$(bash cluster/protoc.sh) cargo build --features etcd
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
protox=$here/target/tools/bin/protox
if [ ! -x "$protox" ]; then
  echo "installing protox (a protoc in pure Rust) into target/tools..." >&2
  cargo install --quiet --locked protox --version 0.10.0 --features bin --root "$here/target/tools"
fi
echo "$protox"
