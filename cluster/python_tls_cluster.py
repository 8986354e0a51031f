"""A local three-node TLS cluster for the Python measurements in this folder: certificates from
`leasehold certs`, client certificates demanded, authorization off, every node stopped at the
end."""

import contextlib
import os
import subprocess
import sys
import tempfile
import time


@contextlib.contextmanager
def tls_cluster(binary, endpoints, peer_ports):
    """Three nodes serving clients at `endpoints` and peers at 127.0.0.1:`peer_ports`, once
    they serve: yields the certificates' directory (ca.pem, client.pem, client-key.pem) and
    the environment a `leasehold` command needs to reach them."""
    peers = ",".join(f"{i}=127.0.0.1:{port}" for i, port in enumerate(peer_ports, 1))
    with tempfile.TemporaryDirectory() as root:
        tls_dir = f"{root}/tls"
        subprocess.run([binary, "certs", "--dir", tls_dir, "--nodes", "3"], check=True, capture_output=True)
        nodes = []
        try:
            for i in (1, 2, 3):
                tls = ["--tls-cert", f"{tls_dir}/node-{i}.pem", "--tls-key", f"{tls_dir}/node-{i}-key.pem",
                       "--tls-ca", f"{tls_dir}/ca.pem", "--client-cert-auth", "--no-authorization"]
                nodes.append(subprocess.Popen(
                    [binary, "serve", "--id", str(i), "--listen", endpoints[i - 1],
                     "--peer-listen", f"127.0.0.1:{peer_ports[i - 1]}", "--data-dir", f"{root}/node-{i}",
                     "--peers", peers, *tls],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            env = dict(os.environ, LEASEHOLD_TLS_CA=f"{tls_dir}/ca.pem", LEASEHOLD_TLS_CERT=f"{tls_dir}/client.pem",
                       LEASEHOLD_TLS_KEY=f"{tls_dir}/client-key.pem")
            deadline = time.monotonic() + 30
            while subprocess.run([binary, "status", "--endpoints", ",".join(endpoints)], env=env,
                                 capture_output=True).returncode != 0:
                if time.monotonic() > deadline:
                    sys.exit("the cluster did not serve within 30 s")
                time.sleep(0.2)
            yield tls_dir, env
        finally:
            for node in nodes:
                node.kill()
                node.wait()
