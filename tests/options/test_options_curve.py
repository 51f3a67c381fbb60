"""The CURVE options: certificates as pyzmq and CZMQ write them, and every way to get them
wrong, each refused when the options are parsed (before any socket or data) with an error
naming the option."""

from __future__ import annotations

import os

import pytest
import zmq
import zmq.auth

from spark_zmq.options import OptionError, SinkOptions, SourceOptions
from spark_zmq.patterns.curve_keys import ANY_KEY, keygen

pytestmark = pytest.mark.timeout(60)

ENDPOINT = {"endpoints": "@tcp://127.0.0.1:5999"}


@pytest.fixture
def certs(tmp_path):
    public, secret = zmq.auth.create_certificates(str(tmp_path), "me")
    server_public, _ = zmq.auth.create_certificates(str(tmp_path), "server")
    authorized = tmp_path / "authorized"
    authorized.mkdir()
    zmq.auth.create_certificates(str(authorized), "client")
    os.remove(authorized / "client.key_secret")
    return {"public": public, "secret": secret, "server": server_public, "authorized": str(authorized), "dir": tmp_path}


def _source(**options):
    return SourceOptions.parse({**ENDPOINT, **options})


def _refused(option, match, parse=_source, **options):
    with pytest.raises(OptionError, match=match) as caught:
        parse(**options)
    assert caught.value.option == option, (caught.value.option, str(caught.value))
    return str(caught.value)


def test_server_and_client_settings_from_pyzmq_certificates(certs):
    server = _source(curveCertificate=certs["secret"], curveAuthorizedKeys=certs["authorized"]).curve
    assert server.is_server and len(server.authorized) == 1
    assert server.public_key == zmq.auth.load_certificate(certs["secret"])[0]
    client = SinkOptions.parse(
        {"endpoints": "tcp://h:1", "curveCertificate": certs["secret"], "curveServerKey": certs["server"]}
    ).curve
    assert not client.is_server and client.server_key == zmq.auth.load_certificate(certs["server"])[0]
    z85 = zmq.auth.load_certificate(certs["server"])[0].decode()
    assert _source(curveCertificate=certs["secret"], curveServerKey=z85).curve.server_key == z85.encode()
    assert _source(curveCertificate=certs["secret"], curveAuthorizedKeys=" * ").curve.authorized == ANY_KEY
    assert _source().curve is None


def test_secrets_never_show_in_a_repr(certs):
    options = _source(curveCertificate=certs["secret"], curveAuthorizedKeys="*")
    secret = zmq.auth.load_certificate(certs["secret"])[1].decode()
    assert secret not in repr(options) and secret not in repr(options.curve)


def test_a_czmq_zcert_certificate_works(certs, tmp_path):
    public, secret = zmq.curve_keypair()
    path = tmp_path / "czmq.key_secret"
    path.write_text(
        "#   ****  Generated on 2026-11-01 12:00:00 by CZMQ  ****\n"
        "#   ZeroMQ CURVE **Secret** Certificate\n"
        "#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.\n\n"
        'metadata\n    name = "czmq"\ncurve\n'
        f'    public-key = "{public.decode()}"\n    secret-key = "{secret.decode()}"\n'
    )
    curve = _source(curveCertificate=str(path), curveAuthorizedKeys="*").curve
    assert (curve.public_key, curve.secret_key) == (public, secret)


def _czmq_certificate(path, public: bytes, secret=None) -> None:
    """A certificate as CZMQ's ``zcert_save`` writes it (``zcert_save_public`` without ``secret``)."""
    kind = "**Secret** Certificate" if secret else "CURVE Public Certificate"
    keys = f'    public-key = "{public.decode()}"\n'
    if secret:
        keys += f'    secret-key = "{secret.decode()}"\n'
    path.write_text(
        f"#   ****  Generated on 2026-11-01 12:00:00 by CZMQ  ****\n#   ZeroMQ {kind}\n\n"
        f'metadata\n    name = "client"\ncurve\n{keys}'
    )


def test_authorized_keys_reads_a_czmq_certificate_store_and_its_client_connects(certs, tmp_path):
    """CZMQ's ``zcertstore`` convention: every file not ending ``_secret`` is a public
    certificate (``client.cert``); it was refused as holding no '*.key' file (#43)."""
    from spark_zmq.patterns import Pull

    public, secret = zmq.curve_keypair()
    store = tmp_path / "store"
    store.mkdir()
    _czmq_certificate(store / "client.cert", public)
    _czmq_certificate(store / "client.cert_secret", public, secret)
    (store / "README").write_text("the clients' certificates\n")  # not a certificate: skipped, as CZMQ does
    other_public, other_secret = zmq.curve_keypair()
    _czmq_certificate(store / ".hidden.cert", other_public)  # hidden: not read
    curve = _source(curveCertificate=certs["secret"], curveAuthorizedKeys=str(store)).curve
    assert curve.authorized == frozenset({public})

    server_public = zmq.auth.load_certificate(certs["secret"])[0]
    context = zmq.Context()
    with Pull("@tcp://127.0.0.1:*", curve=curve) as pull:
        push = context.socket(zmq.PUSH)
        try:
            push.setsockopt(zmq.LINGER, 0)
            push.curve_publickey, push.curve_secretkey, push.curve_serverkey = public, secret, server_public
            push.connect(pull.last_endpoint)
            push.send(b"from a CZMQ client's key", flags=0)
            assert pull.recv(timeout=10) == b"from a CZMQ client's key"
        finally:
            push.close(0)
            context.term()


def test_a_damaged_pyzmq_key_file_in_a_store_is_still_an_error(certs, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    _czmq_certificate(store / "client.cert", zmq.curve_keypair()[0])
    (store / "broken.key").write_text("not a certificate\n")
    text = _refused(
        "curveAuthorizedKeys", "broken.key", curveCertificate=certs["secret"], curveAuthorizedKeys=str(store)
    )
    assert "not a ZeroMQ certificate" in text


def test_keygen_writes_a_pair_pyzmq_reads_with_a_private_secret(tmp_path):
    public_file, secret_file = keygen(str(tmp_path), "node1")
    assert zmq.auth.load_certificate(secret_file)[1] is not None
    assert os.stat(secret_file).st_mode & 0o777 == 0o600
    with pytest.raises(FileExistsError):
        keygen(str(tmp_path), "node1")


@pytest.mark.parametrize("side", ["source", "sink"])
def test_every_bad_combination_is_refused_naming_the_option(certs, side):
    if side == "source":
        parse = _source
    else:

        def parse(**options):
            return SinkOptions.parse({"endpoints": "tcp://h:1", **options})

    missing = str(certs["dir"] / "nope.key_secret")
    _refused(
        "curveCertificate", "cannot read the certificate file", parse, curveCertificate=missing, curveAuthorizedKeys="*"
    )
    _refused(
        "curveCertificate", "holds only a public key", parse, curveCertificate=certs["public"], curveAuthorizedKeys="*"
    )
    _refused(
        "curveCertificate", "is not a regular file", parse, curveCertificate=str(certs["dir"]), curveAuthorizedKeys="*"
    )
    _refused(
        "curveServerKey",
        "neither a 40-character Z85 public key nor an existing certificate file",
        parse,
        curveCertificate=certs["secret"],
        curveServerKey="short",
    )
    _refused("curveServerKey", "not valid Z85", parse, curveCertificate=certs["secret"], curveServerKey="~" * 40)
    _refused("curveCertificate", "'curveServerKey' needs 'curveCertificate'", parse, curveServerKey=certs["server"])
    _refused("curveCertificate", "'curveAuthorizedKeys' needs 'curveCertificate'", parse, curveAuthorizedKeys="*")
    _refused("curveAuthorizedKeys", "needs 'curveAuthorizedKeys'", parse, curveCertificate=certs["secret"])
    _refused(
        "curveAuthorizedKeys",
        "exclude each other",
        parse,
        curveCertificate=certs["secret"],
        curveServerKey=certs["server"],
        curveAuthorizedKeys="*",
    )
    empty = certs["dir"] / "empty"
    empty.mkdir(exist_ok=True)
    _refused(
        "curveAuthorizedKeys",
        "holds no public certificate",
        parse,
        curveCertificate=certs["secret"],
        curveAuthorizedKeys=str(empty),
    )
    _refused(
        "curveAuthorizedKeys",
        "is not a directory",
        parse,
        curveCertificate=certs["secret"],
        curveAuthorizedKeys=certs["public"],
    )


def test_damaged_certificate_files_are_refused(certs, tmp_path):
    cases = {
        "garbage.key_secret": b"\x00\xff" * 100,
        "badkey.key_secret": b'curve\n    public-key = "abc"\n    secret-key = "def"\n',
        "mismatch.key_secret": (
            b'curve\n    public-key = "%s"\n    secret-key = "%s"\n' % (zmq.curve_keypair()[0], zmq.curve_keypair()[1])
        ),
        "huge.key_secret": b"#" * (1 << 20),
    }
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        text = _refused("curveCertificate", ".", curveCertificate=str(path), curveAuthorizedKeys="*")
        assert name in text


@pytest.mark.parametrize("option", ["curveCertificate", "curveServerKey", "curveAuthorizedKeys"])
def test_a_name_with_a_lone_surrogate_is_refused_naming_the_option(option):
    """Found by the parsing property test: os.stat raised UnicodeEncodeError, not an
    OptionError, for a certificate path holding a lone surrogate."""
    with pytest.raises(OptionError, match=f"option '{option}'.*cannot be encoded"):
        SourceOptions.parse({"endpoints": "@tcp://127.0.0.1:5999", option: "/a/\ud800"})
