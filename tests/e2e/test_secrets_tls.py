"""Secrets from the environment are sent and never written; replay reaches an endpoint that needs
them; HTTPS with a private CA, insecure mode (warned), and a client certificate the server requires.
The servers are the simulator, requiring an API key (`api_key_env`) or serving TLS (`tls_cert`)."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadgate.cli import main
from loadgate.config.simconfig import DivergenceConfig, SimConfig
from loadgate.core.series import SERIES_FILE, read_series
from loadgate.jsonutil import load_json
from loadgate.sim.process import SimProcess
from tests.profiles import LAX_HEALTH, tiny_corpus

KEY = "sk-live-0123456789abcdef-loadgate-test"
TEAM = "team-secret-9876543210"
FAST = {"decode_step_us": 500, "decode_us_per_seq": 10}


def profile(tmp: Path, name: str, target: dict[str, Any], **extra: Any) -> Path:
    doc = {"name": name, "target": target,
           "workload": {"requests": 8, "input_len": {"dist": "fixed", "value": 8},
                        "output_len": {"dist": "fixed", "value": 4}},
           "load": {"concurrency": 2}, "health": LAX_HEALTH, "output": {"dir": str(tmp / "out"), "run_id": name}}
    doc.update(extra)
    p = tmp / f"{name}.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def files_containing(root: Path, *needles: str) -> list[str]:
    hits = []
    for f in root.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            hits += [f"{f}: {n[:6]}…" for n in needles if n.encode() in data]
    return hits


def test_a_key_from_the_environment_is_sent_and_written_nowhere_and_replay_reaches_the_endpoint(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LG_KEY", KEY)
    monkeypatch.setenv("LG_TEAM", TEAM)
    target = {"endpoint": "embedded", "api_key_env": "LG_KEY", "headers": {"X-Team": "${LG_TEAM}"},
              "sim": {**FAST, "api_key_env": "LG_KEY"}}
    exactness = {"baseline": "sim-reference", "corpus": str(tiny_corpus(tmp_path))}
    assert main(["run", "-q", str(profile(tmp_path, "ok", target, exactness=exactness))]) == 0
    # a check that diverges (batch-variant near-ties with 3 in flight) writes reproducer bundles
    bad = {**target, "sim": {**target["sim"], "near_tie_rate": 0.5, "divergence": {"batch_variant": True}}}
    code = main(["check", str(profile(tmp_path, "div", bad, exactness={
        **exactness, "contract": {"tier": "token-exact"}, "scenarios": {"solo": False, "concurrent": 3}}))])
    assert code == 10
    bundles = sorted((tmp_path / "out" / "div" / "divergences").glob("*.json"))
    assert bundles
    out = capsys.readouterr()
    assert KEY not in out.out + out.err and TEAM not in out.out + out.err
    assert files_containing(tmp_path / "out", KEY, TEAM) == []  # run folders, baselines, bundles
    # a ${NAME} template is kept as written (it is no secret); its value is written nowhere
    assert load_json(tmp_path / "out" / "ok" / "meta.json")["profile"]["target"]["headers"] == {"X-Team": "${LG_TEAM}"}

    # replay sends the key again, read from this environment, to an engine that requires it
    cfg = SimConfig(api_key_env="LG_KEY", near_tie_rate=0.5, divergence=DivergenceConfig(batch_variant=True), **FAST)
    with SimProcess(cfg) as sim:
        code = main(["replay", str(bundles[0]), "--endpoint", sim.url])
        replayed = capsys.readouterr().out
        assert code in (0, 10) and "run 0:" in replayed and "request failed" not in replayed, replayed
        monkeypatch.delenv("LG_KEY")
        assert main(["replay", str(bundles[0]), "--endpoint", sim.url]) == 2
        assert "LG_KEY is not set" in capsys.readouterr().err


def test_without_the_key_the_engine_refuses_and_loadgate_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LG_KEY", KEY)
    with SimProcess(SimConfig(api_key_env="LG_KEY", **FAST)) as sim:
        assert main(["run", "-q", "--unverified", str(profile(tmp_path, "nokey", {"endpoint": sim.url}))]) == 3
    err = capsys.readouterr().err.strip()
    assert "HTTP 401" in err and "\n" not in err


def test_a_traceback_shown_on_request_masks_the_secret(tmp_path, monkeypatch, capsys):
    from loadgate import commands
    from loadgate.secrets import register

    monkeypatch.setenv("LOADGATE_DEBUG", "1")
    register(KEY)

    def boom(*a: Any, **k: Any) -> None:
        raise RuntimeError(f"something went wrong near {KEY}")

    monkeypatch.setattr(commands, "validate", boom)
    assert main(["validate", "x.yaml"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and KEY not in err and "***" in err


# --- TLS ------------------------------------------------------------------------------------------

def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private CA, a server certificate for 127.0.0.1 and a client certificate, all signed by it."""
    d = tmp_path_factory.mktemp("pki")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=loadgate test CA", cwd=d)
    for name, usage, san in (("server", "serverAuth", "subjectAltName=IP:127.0.0.1\n"), ("client", "clientAuth", "")):
        (d / f"{name}.ext").write_text(f"{san}basicConstraints=CA:FALSE\nextendedKeyUsage={usage}\n")
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={name}", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=d)
    return d


def tls_sim(pki: Path, client_ca: bool = False) -> SimProcess:
    return SimProcess(SimConfig(tls_cert=str(pki / "server.pem"), tls_key=str(pki / "server.key"),
                                tls_client_ca=str(pki / "ca.pem") if client_ca else None, **FAST))


def run_https(tmp: Path, url: str, tls: dict[str, Any] | None, capsys: Any) -> tuple[int, str, str]:
    target: dict[str, Any] = {"endpoint": url}
    if tls is not None:
        target["tls"] = tls
    code = main(["run", "-q", "--unverified", str(profile(tmp, "tls", target))])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_https_with_the_private_ca_file(tmp_path, pki, capsys):
    with tls_sim(pki) as sim:
        assert sim.url.startswith("https://")
        code, out, _ = run_https(tmp_path, sim.url, {"ca_file": str(pki / "ca.pem")}, capsys)
    assert code == 11 and "8 succeeded, 0 failed" in out and "not checked" not in out
    assert "warning: metrics" not in out  # the scraper process reached the https /metrics with the CA too
    assert read_series(tmp_path / "out" / "tls" / SERIES_FILE).of("server")


def test_https_insecure_works_and_every_report_warns(tmp_path, pki, capsys):
    with tls_sim(pki) as sim:
        code, out, _ = run_https(tmp_path, sim.url, {"insecure": True}, capsys)
    assert code == 11 and "8 succeeded" in out and "WARNING: the server's TLS certificate was not checked" in out
    assert main(["report", str(tmp_path / "out" / "tls")]) == 11
    assert "TLS certificate was not checked" in capsys.readouterr().out
    main(["report", "--format", "markdown", str(tmp_path / "out" / "tls")])
    assert "TLS certificate was not checked" in capsys.readouterr().out


def test_https_without_the_ca_fails_clearly(tmp_path, pki, capsys):
    with tls_sim(pki) as sim:
        code, _, err = run_https(tmp_path, sim.url, None, capsys)
    assert code == 3 and "CERTIFICATE_VERIFY_FAILED" in err and "\n" not in err.strip(), err
    assert "give the CA that signed it in target.tls.ca_file" in err, err
    assert "client_cert" not in err and "workload.tokenizer" not in err, err  # hints for other failures


def test_the_command_imports_aiohttp_without_the_system_cas_and_puts_the_environment_back():
    """aiohttp's import-time default contexts hold no CA (the ~140 ms of loading them saved), and the
    variables that hid the store are as they were: set ones restored, unset ones unset again."""
    code = ("import os, ssl; os.environ['SSL_CERT_DIR'] = '/etc/ssl/certs'; os.environ.pop('SSL_CERT_FILE', None); "
            "from loadgate.entry import import_aiohttp_without_system_cas as f; f(); import aiohttp.connector as c; "
            "print(c._SSL_CONTEXT_VERIFIED.cert_store_stats()['x509_ca'], os.environ.get('SSL_CERT_DIR'), "
            "'SSL_CERT_FILE' in os.environ)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["0", "/etc/ssl/certs", "False"]


def test_an_https_engine_signed_by_a_ca_of_the_system_store_is_reached_by_the_loadgate_command(tmp_path, pki):
    """The command imports aiohttp with the store hidden; the session it opens to an https engine
    (and its https /metrics) still verifies against the store, read when the session is made. The
    store here is the private CA, as OpenSSL's SSL_CERT_FILE names it; no `target.tls`."""
    with tls_sim(pki) as sim:
        p = profile(tmp_path, "store", {"endpoint": sim.url, "metrics_url": sim.url + "/metrics"})
        env = {**os.environ, "SSL_CERT_FILE": str(pki / "ca.pem")}
        r = subprocess.run([sys.executable, "-m", "loadgate", "run", "-q", "--unverified", str(p)], env=env,
                           capture_output=True, text=True, timeout=600)
    assert r.returncode == 11 and "8 succeeded, 0 failed" in r.stdout, (r.returncode, r.stdout, r.stderr)


def test_a_session_to_an_http_engine_whose_metrics_are_https_carries_the_profiles_tls():
    from loadgate.net.http import SessionSettings, TlsFiles

    s = SessionSettings({}, TlsFiles(insecure=True))
    assert s.ssl_for("http://127.0.0.1:8000") is None
    ctx = s.ssl_for("http://127.0.0.1:8000", "https://127.0.0.1:9100/metrics")
    assert ctx is not None and ctx.verify_mode == ssl.CERT_NONE


def test_a_server_that_requires_a_client_certificate(tmp_path, pki, capsys):
    with tls_sim(pki, client_ca=True) as sim:
        code, out, _ = run_https(tmp_path, sim.url, {"ca_file": str(pki / "ca.pem"),
                                                     "client_cert": str(pki / "client.pem"),
                                                     "client_key": str(pki / "client.key")}, capsys)
        assert code == 11 and "8 succeeded, 0 failed" in out
        assert "warning: metrics" not in out  # the scraper process presented the client certificate too
        (tmp_path / "b").mkdir()
        code, _, err = run_https(tmp_path / "b", sim.url, {"ca_file": str(pki / "ca.pem")}, capsys)
    assert code == 3 and "\n" not in err.strip() and ("certificate" in err.lower() or "handshake" in err.lower()), err


def test_an_environment_proxy_that_would_carry_the_requests_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert main(["run", "-q", "--unverified", str(profile(tmp_path, "px", {"endpoint": "http://10.255.0.1:9"}))]) == 2
    err = capsys.readouterr().err
    assert "NO_PROXY" in err and "\n" not in err.strip()
    monkeypatch.setenv("NO_PROXY", "10.255.0.1")
    from loadgate.net.http import refuse_proxies
    refuse_proxies("http://10.255.0.1:9")  # NO_PROXY names the host: no refusal


def test_literal_credential_headers_of_the_ab_baseline_are_masked_in_ab_json(tmp_path):
    """ab.json keeps the A/B settings; a literal Authorization header of the baseline side is
    written masked there, as in meta.json (it was written as typed)."""
    target = {"endpoint": "embedded", "sim": FAST}
    ab = {"baseline": {"endpoint": "embedded", "sim": FAST, "headers": {"Authorization": "Bearer sk-literal-123"}},
          "pairs": 2}
    assert main(["run", "-q", "--unverified", str(profile(tmp_path, "ab", target, ab=ab))]) in (11, 22)
    assert files_containing(tmp_path / "out", "sk-literal-123") == []
    saved = load_json(tmp_path / "out" / "ab" / "ab.json")["ab"]["baseline"]["headers"]
    assert saved == {"Authorization": "***"}


@pytest.mark.parametrize("sim", [{"api_key_env": "LG_NOT_SET_ANYWHERE"}, {"tls_cert": "nothere.pem", "tls_key": "no.pem"}])
def test_an_embedded_simulator_refusing_its_settings_is_one_line_not_an_internal_error(tmp_path, capfd, sim):
    code = main(["run", "-q", "--unverified", str(profile(tmp_path, "bad", {"endpoint": "embedded",
                                                                           "sim": {**FAST, **sim}}))])
    err = capfd.readouterr().err
    assert code == 2, err
    assert "internal error" not in err and ("sim.api_key_env" in err or "sim.tls_cert" in err), err
