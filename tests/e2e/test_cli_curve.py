"""CURVE from the command line: ``spark-zmq keygen``, ``produce``/``consume`` with the
``--curve-*`` flags across processes on real sockets, interoperability with a plain pyzmq
CURVE server, and the jobs' ``--curve-*`` flags checked before Spark starts."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import time

import pytest
import zmq
import zmq.auth
from clitest import keygen, unboxed
from zmq.auth.thread import ThreadAuthenticator

pytestmark = pytest.mark.timeout(120)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.path.join(os.path.dirname(sys.executable), "spark-zmq")


def _cli(*args: str, timeout: float = 90, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def _consumer(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [CLI, "consume", "--no-progress", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _listening(port: int, timeout: float = 60) -> None:
    """Wait until something listens on ``port``, read from /proc: a probing connection
    would itself be a failed handshake to a CURVE server, and the tests count those. (A
    refused producer gives up after a few seconds without an answer, so it must not start
    before a slow consumer has bound.)"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                rows = open(table).read().splitlines()[1:]
            except OSError:
                continue
            if any(row.split()[1].endswith(f":{port:04X}") and row.split()[3] == "0A" for row in rows):
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port} after {timeout} s")


def _squashed(text: str) -> str:
    """``text`` without whitespace or box edges: the box also breaks long paths mid-word."""
    return "".join(text.replace("│", "").split())


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """A server pair, an authorized client (its public key alone in ``authorized/``) and a
    stranger, all made by ``spark-zmq keygen``: once for the module (three CLI starts, 1 s
    each idle and up to 18 s under load, were a third of its time); no test writes them."""
    tmp_path = tmp_path_factory.mktemp("keys")
    server_public, server_secret = keygen(tmp_path / "server", "server")
    client_public, client_secret = keygen(tmp_path / "client", "client")
    _, stranger_secret = keygen(tmp_path / "stranger", "stranger")
    authorized = tmp_path / "authorized"
    authorized.mkdir()
    (authorized / "client.key").write_bytes(open(client_public, "rb").read())
    return dict(
        server_public=server_public,
        server_secret=server_secret,
        client_secret=client_secret,
        stranger_secret=stranger_secret,
        authorized=str(authorized),
    )


# -- keygen -------------------------------------------------------------------------------------


def test_keygen_writes_a_pair_pyzmq_reads_with_a_private_secret(tmp_path):
    result = _cli("keygen", "node", "--dir", str(tmp_path / "keys"))
    assert result.returncode == 0, result.stderr
    public_file, secret_file = str(tmp_path / "keys" / "node.key"), str(tmp_path / "keys" / "node.key_secret")
    public, none = zmq.auth.load_certificate(public_file)
    assert none is None
    same_public, secret = zmq.auth.load_certificate(secret_file)
    assert same_public == public and zmq.curve_public(secret) == public
    assert stat.S_IMODE(os.stat(secret_file).st_mode) == 0o600
    assert public_file in result.stdout and secret_file in result.stdout
    assert public.decode() in result.stdout
    assert secret.decode() not in result.stdout + result.stderr


def test_keygen_defaults_to_the_current_directory(tmp_path):
    result = _cli("keygen", "here", cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(tmp_path)) == ["here.key", "here.key_secret"]


def test_keygen_refuses_to_overwrite_a_pair_or_take_a_path_as_name(tmp_path):
    assert _cli("keygen", "node", "--dir", str(tmp_path)).returncode == 0
    before = open(tmp_path / "node.key_secret").read()
    again = _cli("keygen", "node", "--dir", str(tmp_path))
    assert again.returncode == 1
    assert "exists" in again.stderr and "refusing to overwrite" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1 and "Traceback" not in again.stderr
    assert open(tmp_path / "node.key_secret").read() == before
    bad = _cli("keygen", "a/b", "--dir", str(tmp_path))
    assert bad.returncode == 1 and "plain file name" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


# -- produce and consume ------------------------------------------------------------------------


def test_curve_client_producer_to_curve_server_consumer_counts_every_message(free_port, keys):
    consumer = _consumer(
        f"@tcp://127.0.0.1:{free_port}",
        "--count",
        "3000",
        "--timeout",
        "60",
        "--curve-certificate",
        keys["server_secret"],
        "--curve-authorized-keys",
        keys["authorized"],
    )
    produced = _cli(
        "produce",
        f"tcp://127.0.0.1:{free_port}",
        "--no-progress",
        "--count",
        "3000",
        "--curve-certificate",
        keys["client_secret"],
        "--curve-server-key",
        keys["server_public"],
    )
    out, err = consumer.communicate(timeout=90)
    assert produced.returncode == 0, produced.stderr
    assert "sent 3000 messages" in produced.stdout
    assert consumer.returncode == 0, err
    assert "received 3000 messages" in out
    assert "rejected" not in err


def test_unauthorized_producer_delivers_nothing_and_the_consumer_counts_the_refusal(free_port, keys):
    consumer = _consumer(
        f"@tcp://127.0.0.1:{free_port}",
        "--count",
        "100",
        "--timeout",
        "4",
        "--curve-certificate",
        keys["server_secret"],
        "--curve-authorized-keys",
        keys["authorized"],
    )
    _listening(free_port)
    produced = _cli(
        "produce",
        f"tcp://127.0.0.1:{free_port}",
        "--no-progress",
        "--count",
        "100",
        "--curve-certificate",
        keys["stranger_secret"],
        "--curve-server-key",
        keys["server_public"],
    )
    out, err = consumer.communicate(timeout=90)
    # the producer learns of the refusal and says so, instead of lingering and reporting 100 sent
    assert produced.returncode == 1, produced.stdout + produced.stderr
    assert "none of the 100 messages can be delivered" in unboxed(produced.stderr)
    assert "refused this side's CURVE certificate" in unboxed(produced.stderr)
    assert consumer.returncode == 1
    assert "received 0 messages" in out
    summary = err.strip().splitlines()[-1]
    assert "received 0 of 100 messages" in summary
    rejected = re.search(r"(\d+) CURVE handshake\(s\) rejected", summary)
    assert rejected and int(rejected.group(1)) >= 1, err
    assert "Traceback" not in err


def test_a_consumer_that_got_everything_still_reports_the_refused_stranger(free_port, keys):
    consumer = _consumer(
        f"@tcp://127.0.0.1:{free_port}",
        "--count",
        "300",
        "--timeout",
        "60",
        "--curve-certificate",
        keys["server_secret"],
        "--curve-authorized-keys",
        keys["authorized"],
    )
    client_args = [
        "produce",
        f"tcp://127.0.0.1:{free_port}",
        "--no-progress",
        "--count",
        "300",
        "--curve-server-key",
        keys["server_public"],
    ]
    _listening(free_port)
    stranger = _cli(*client_args, "--curve-certificate", keys["stranger_secret"])
    assert stranger.returncode == 1  # it waited for the consumer's answer: a refusal
    produced = _cli(*client_args, "--curve-certificate", keys["client_secret"])
    out, err = consumer.communicate(timeout=90)
    assert produced.returncode == 0, produced.stderr
    assert consumer.returncode == 0, err
    assert "received 300 messages" in out
    assert re.fullmatch(
        r"warning: \d+ CURVE handshake\(s\) rejected \(last: a client's CURVE key was refused.*",
        err.strip().splitlines()[-1],
    ), err


def test_a_refused_producer_whose_queue_is_full_fails_instead_of_blocking_forever(free_port, keys):
    """A refused client's queue never drains: with more messages than its high-water mark, the
    send blocks before the run ends. It must still end with the refusal (this hung: the send
    waited for room that a refused connection never makes, whatever the linger)."""
    consumer = _consumer(
        f"@tcp://127.0.0.1:{free_port}",
        "--count",
        "1",
        "--timeout",
        "30",
        "--curve-certificate",
        keys["server_secret"],
        "--curve-authorized-keys",
        keys["authorized"],
    )
    _listening(free_port)
    try:
        stranger = _cli(
            "produce",
            f"tcp://127.0.0.1:{free_port}",
            "--no-progress",
            "--count",
            "300",
            "--hwm",
            "10",
            "--curve-server-key",
            keys["server_public"],
            "--curve-certificate",
            keys["stranger_secret"],
            timeout=60,
        )
    finally:
        consumer.kill()
        consumer.communicate()
    assert stranger.returncode == 1
    assert "CURVE handshake(s) rejected and none accepted" in unboxed(stranger.stderr), stranger.stderr


def test_a_server_accepting_any_key_takes_a_client_it_has_never_seen(free_port, keys):
    consumer = _consumer(
        f"@tcp://127.0.0.1:{free_port}",
        "--count",
        "500",
        "--timeout",
        "60",
        "--curve-certificate",
        keys["server_secret"],
        "--curve-authorized-keys",
        "*",
    )
    produced = _cli(
        "produce",
        f"tcp://127.0.0.1:{free_port}",
        "--no-progress",
        "--count",
        "500",
        "--curve-certificate",
        keys["stranger_secret"],
        "--curve-server-key",
        keys["server_public"],
    )
    out, err = consumer.communicate(timeout=90)
    assert produced.returncode == 0, produced.stderr
    assert consumer.returncode == 0, err
    assert "received 500 messages" in out


def test_a_client_with_the_wrong_server_key_is_refused_on_both_sides(free_port, keys, tmp_path):
    other_public, _ = keygen(tmp_path / "other", "other")
    consumer = _consumer(
        f"@tcp://127.0.0.1:{free_port}",
        "--count",
        "10",
        "--timeout",
        "4",
        "--curve-certificate",
        keys["server_secret"],
        "--curve-authorized-keys",
        "*",
    )
    _listening(free_port)
    produced = _cli(
        "produce",
        f"tcp://127.0.0.1:{free_port}",
        "--no-progress",
        "--count",
        "10",
        "--curve-certificate",
        keys["client_secret"],
        "--curve-server-key",
        other_public,
    )
    out, err = consumer.communicate(timeout=90)
    assert produced.returncode == 1 and "CURVE handshake(s) rejected" in produced.stderr
    assert consumer.returncode == 1 and "received 0 messages" in out
    assert "CURVE handshake(s) rejected" in err.strip().splitlines()[-1]


def test_a_plain_pyzmq_curve_server_receives_from_produce_given_the_z85_server_key(tmp_path, keys):
    """Interoperability: the server is pyzmq's own ZAP handler and socket options, not this
    project's code; the client side is ``spark-zmq produce`` with the key as Z85 text."""
    server_public, server_secret = zmq.auth.load_certificate(keys["server_secret"])
    context = zmq.Context()
    auth = ThreadAuthenticator(context)
    auth.start()
    try:
        auth.configure_curve(domain="*", location=keys["authorized"])
        server = context.socket(zmq.PULL)
        server.curve_secretkey, server.curve_publickey, server.curve_server = server_secret, server_public, True
        port = server.bind_to_random_port("tcp://127.0.0.1")
        produced = _cli(
            "produce",
            f"tcp://127.0.0.1:{port}",
            "--no-progress",
            "--format",
            "text",
            "--count",
            "200",
            "--curve-certificate",
            keys["client_secret"],
            f"--curve-server-key={server_public.decode()}",
        )
        assert produced.returncode == 0, produced.stderr
        received = []
        while len(received) < 200 and server.poll(10_000):
            received.append(server.recv())
        assert [int(m.split(b",")[0]) for m in received] == list(range(200))
        server.close(linger=0)
    finally:
        auth.stop()
        context.term()


@pytest.mark.parametrize(
    "command, flags, message",
    [
        (
            "consume",
            ["--curve-certificate", "{server_secret}"],
            "--curve-certificate without --curve-server-key makes this side a CURVE server, which needs "
            "--curve-authorized-keys",
        ),
        ("consume", ["--curve-authorized-keys", "*"], "--curve-authorized-keys needs --curve-certificate"),
        ("produce", ["--curve-server-key", "{server_public}"], "--curve-server-key needs --curve-certificate"),
        (
            "produce",
            [
                "--curve-certificate",
                "{client_secret}",
                "--curve-server-key",
                "{server_public}",
                "--curve-authorized-keys",
                "*",
            ],
            "--curve-server-key and --curve-authorized-keys exclude each other",
        ),
        (
            "produce",
            ["--curve-certificate", "{missing}", "--curve-server-key", "{server_public}"],
            "--curve-certificate: cannot read the certificate file",
        ),
        (
            "produce",
            ["--curve-certificate", "{server_public}", "--curve-server-key", "{server_public}"],
            "--curve-certificate: {server_public!r} holds only a public key",
        ),
        (
            "produce",
            ["--curve-certificate", "{client_secret}", "--curve-server-key", "not-a-key"],
            "--curve-server-key: 'not-a-key' is neither a 40-character Z85 public key nor an existing certificate file",
        ),
        (
            "consume",
            ["--curve-certificate", "{server_secret}", "--curve-authorized-keys", "{missing}"],
            "--curve-authorized-keys: {missing!r} is not a directory",
        ),
    ],
)
def test_bad_curve_flags_are_usage_errors_naming_the_flag(keys, tmp_path, command, flags, message):
    values = dict(keys, missing=str(tmp_path / "missing"))
    endpoint = "@tcp://127.0.0.1:1" if command == "consume" else "tcp://127.0.0.1:1"
    result = _cli(command, endpoint, "--no-progress", *[f.format(**values) for f in flags])
    assert result.returncode == 2, result.stdout + result.stderr
    assert _squashed(message.format(**values)) in _squashed(result.stderr)
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["produce", "consume"])
def test_help_lists_the_curve_flags(command):
    result = _cli(command, "--help")
    assert result.returncode == 0
    for flag in ("--curve-certificate", "--curve-server-key", "--curve-authorized-keys"):
        assert flag in result.stdout


# -- the jobs' flags (argument parsing only: no Spark) -------------------------------------------

JOBS = {
    "quickstart": [],
    "zmq_to_parquet": ["--endpoints", "@tcp://127.0.0.1:1", "--format", "raw", "--output", "o", "--checkpoint", "c"],
    "windowed_topics": ["--endpoints", "tcp://127.0.0.1:1", "--output", "o", "--checkpoint", "c"],
    "pipeline_stage": [
        "--input",
        "@tcp://127.0.0.1:1",
        "--output",
        "tcp://127.0.0.1:2",
        "--schema",
        "a long",
        "--checkpoint",
        "c",
    ],
}


def _job(job: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, f"jobs/{job}.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("job", sorted(JOBS))
def test_every_job_lists_the_curve_flags_and_checks_them_before_spark(job, tmp_path):
    help_text = _job(job, "--help").stdout
    for flag in ("--curve-certificate", "--curve-server-key", "--curve-authorized-keys"):
        assert flag in help_text
    missing = str(tmp_path / "nowhere" / "job.key_secret")
    result = _job(job, *JOBS[job], "--curve-certificate", missing, "--curve-authorized-keys", "*")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "usage:" in result.stderr and "Traceback" not in result.stderr
    assert f"error: --curve-certificate: cannot read the certificate file {missing!r}" in result.stderr


@pytest.mark.parametrize(
    "job, args, message",
    [
        (
            "zmq_to_parquet",
            ["--curve-certificate", "{server_secret}"],
            "--curve-certificate without --curve-server-key",
        ),
        ("windowed_topics", ["--curve-server-key", "{server_public}"], "--curve-server-key needs --curve-certificate"),
        (
            "pipeline_stage",
            ["--sink-curve-server-key", "{missing}", "--sink-curve-certificate", "{client_secret}"],
            "--sink-curve-server-key: {missing!r} is neither",
        ),
        (
            "pipeline_stage",
            ["--sink-curve-authorized-keys", "*"],
            "--sink-curve-authorized-keys needs --sink-curve-certificate",
        ),
        (
            "quickstart",
            ["--curve-certificate", "{server_secret}", "--curve-authorized-keys", "{authorized}"],
            "give the built-in producer one of them with --producer-curve-certificate",
        ),
        (
            "quickstart",
            [
                "--curve-certificate",
                "{server_secret}",
                "--curve-authorized-keys",
                "{authorized}",
                "--producer-curve-certificate",
                "{stranger_secret}",
            ],
            "so the source would refuse",
        ),
        (
            "quickstart",
            ["--curve-certificate", "{client_secret}", "--curve-server-key", "{server_public}"],
            "the built-in producer cannot be its server",
        ),
    ],
)
def test_jobs_reject_bad_curve_combinations_naming_the_flags(keys, tmp_path, job, args, message):
    values = dict(keys, missing=str(tmp_path / "missing.key"))
    result = _job(job, *JOBS[job], *[a.format(**values) for a in args])
    assert result.returncode == 2, result.stdout + result.stderr
    assert "usage:" in result.stderr and message.format(**values) in result.stderr


def test_job_curve_flags_become_absolute_data_source_options(keys, monkeypatch):
    """What the jobs hand the connector: absolute paths (Spark's processes run in other
    directories), Z85 text as given, and pipeline_stage's output reusing the stage's
    certificate."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "jobs"))
    monkeypatch.chdir(os.path.dirname(keys["server_secret"]))
    import pipeline_stage

    server_z85 = zmq.auth.load_certificate(keys["server_public"])[0].decode()
    args = pipeline_stage.parse_args(
        JOBS["pipeline_stage"]
        + [
            "--curve-certificate",
            "server.key_secret",
            "--curve-authorized-keys",
            os.path.relpath(keys["authorized"]),
            f"--sink-curve-server-key={server_z85}",
        ]
    )
    assert args.curve == {"curveCertificate": keys["server_secret"], "curveAuthorizedKeys": keys["authorized"]}
    assert args.sink_curve == {"curveCertificate": keys["server_secret"], "curveServerKey": server_z85}
    plain = pipeline_stage.parse_args(JOBS["pipeline_stage"])
    assert plain.curve == {} and plain.sink_curve == {}


def test_a_z85_key_that_begins_with_a_dash_goes_through_the_equals_form(keys, monkeypatch):
    """Z85's alphabet has '-': about one key in 85 begins with it, and argparse then takes
    ``--sink-curve-server-key KEY`` for a missing value. ``--flag=KEY`` always works (the
    flag's help says so); this test once failed at random for passing the key apart."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "jobs"))
    import pipeline_stage

    key = next(public for public, _ in (zmq.curve_keypair() for _ in range(20_000)) if public.startswith(b"-"))
    args = pipeline_stage.parse_args(
        JOBS["pipeline_stage"]
        + ["--sink-curve-certificate", keys["client_secret"], f"--sink-curve-server-key={key.decode()}"]
    )
    assert args.sink_curve == {"curveCertificate": keys["client_secret"], "curveServerKey": key.decode()}
