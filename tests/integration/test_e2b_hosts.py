"""E2B's JS SDKs (2.51.0 and 2.45.0, tests/e2b/package.json) with envd on
per-sandbox host names, as E2B itself serves it: no E2B_SANDBOX_URL, only
E2B_API_URL and E2B_DOMAIN = the server's ports_domain, here with a port
("DOMAIN:PORT", so the SDK's https://49983-ID.DOMAIN:PORT reaches a TLS
proxy on PORT). tests/e2b/hosts.mjs resolves *.DOMAIN to 127.0.0.1 in its
own process and terminates TLS with a wildcard certificate made here by
openssl (trusted through NODE_EXTRA_CA_CERTS), then checks the SDK's
ordinary calls, uploadUrl / downloadUrl with plain fetch (with and without
an expiration; an expired one, another operation, another path, another
sandbox's host refused). One server for both SDKs.

Without node, the SDKs or openssl the file is skipped."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import taprelay  # noqa: E402

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
E2B_DIR = os.path.join(ROOT, "tests", "e2b")
DOMAIN = "sbx.e2bhosts.test"

h = abserver.ServerHarness(budget=240)
node = taprelay.need_e2b_sdks(h)
openssl = shutil.which("openssl")
if not openssl:
    h.skip_all("openssl is not installed (the test makes its TLS certificate with it)")

tls_port = abserver.free_port()
TOKEN = "e2b-hosts-token-%s-0123456789" % os.getpid()
srv = h.start_server(token=TOKEN, config={"ports_domain": "%s:%d" % (DOMAIN, tls_port)})

certdir = os.path.join(h.root, "tls")  # the harness's folder: removed with it
os.makedirs(certdir, exist_ok=True)
key, cert = os.path.join(certdir, "key.pem"), os.path.join(certdir, "cert.pem")
p = subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", key,
                    "-out", cert, "-subj", "/CN=*.%s" % DOMAIN, "-addext", "subjectAltName=DNS:*.%s" % DOMAIN],
                   capture_output=True, text=True, timeout=60)
h.eq(p.returncode, 0, "openssl made a wildcard certificate for *.%s" % DOMAIN, p.stderr)

for sdk in taprelay.E2B_SDKS:
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    env.update({"E2B_API_URL": srv.url + "/e2b", "E2B_DOMAIN": "%s:%d" % (DOMAIN, tls_port), "E2B_API_KEY": TOKEN,
                "E2B_SDK_MODULE": sdk, "E2B_VALIDATE_API_KEY": "false", "AB_TLS_KEY": key, "AB_TLS_CERT": cert,
                "NODE_EXTRA_CA_CERTS": cert})
    taprelay.relay(h, [node, os.path.join(E2B_DIR, "hosts.mjs"), srv.url, TOKEN], env, E2B_DIR,
                   label=sdk, timeout=120, min_checks=20)
h.done()
