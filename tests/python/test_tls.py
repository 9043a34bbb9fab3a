"""TLS from Python: redis-py with ssl=True and the latticekv package's
`connect(tls_ca=...)` against a node started with --tls-cert/--tls-key/--tls-ca
(certificates of a throwaway CA made by trustme)."""
import pytest
import redis
import trustme

import latticekv
from conftest import Node


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    paths = {"ca": d / "ca.pem", "cert": d / "node.pem", "key": d / "node-key.pem"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    leaf.private_key_pem.write_to_path(str(paths["key"]))
    with open(paths["cert"], "wb") as f:
        for blob in leaf.cert_chain_pems:
            f.write(blob.bytes())
    return {k: str(v) for k, v in paths.items()}


@pytest.fixture
def tls_node(pki):
    n = Node("--workers", "2", "--tls-cert", pki["cert"], "--tls-key", pki["key"],
             "--tls-ca", pki["ca"])
    yield n
    assert n.stop() == 0, "node did not stop cleanly on SIGTERM"


def test_redis_py_over_tls(tls_node, pki):
    r = redis.Redis(host=tls_node.resp_host, port=tls_node.resp_port, ssl=True,
                    ssl_ca_certs=pki["ca"])
    assert r.ping() is True
    assert r.set("k", "v") is True
    assert r.get("k") == b"v"
    pipe = r.pipeline(transaction=False)
    for i in range(100):
        pipe.set(f"p{i}", i)
    assert all(pipe.execute())
    assert r.mget([f"p{i}" for i in range(100)]) == [str(i).encode() for i in range(100)]


def test_redis_py_without_tls_gets_no_answer(tls_node):
    plain = redis.Redis(host=tls_node.resp_host, port=tls_node.resp_port,
                        socket_timeout=5)
    with pytest.raises(redis.ConnectionError):
        plain.ping()


def test_native_client_over_tls(tls_node, pki):
    c = latticekv.connect(tls_node.native, tls_ca=pki["ca"])
    for i in range(20):
        c.put(f"n{i}", f"v{i}")
    assert [c.get(f"n{i}") for i in range(20)] == [f"v{i}".encode() for i in range(20)]
    # What redis-py wrote over TLS is there too (one store, two protocols).
    r = redis.Redis(host=tls_node.resp_host, port=tls_node.resp_port, ssl=True,
                    ssl_ca_certs=pki["ca"])
    r.set("shared", "yes")
    assert c.get("shared") == b"yes"


def test_native_client_refuses_an_untrusted_node(tls_node, tmp_path):
    other = trustme.CA()
    path = tmp_path / "other-ca.pem"
    other.cert_pem.write_to_path(str(path))
    with pytest.raises(latticekv.ConnectionError, match="TLS"):
        latticekv.connect(tls_node.native, tls_ca=str(path), timeout=5)
    with pytest.raises(latticekv.ConnectionError):
        latticekv.connect(tls_node.native, timeout=5)  # plain text to a TLS port
