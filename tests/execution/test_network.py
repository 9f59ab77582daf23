"""The jail's network: only a loopback interface, no route, no name service, no way to the
host's loopback, and no IP or netlink socket at all (test_seccomp checks the socket families)."""

import errno
import socket

import pytest

from spade_ray.records import ExecStatus
from tests.execution.test_adversarial import run


def test_no_network_interface_or_route_but_loopback(sandbox):
    r = run(sandbox, """
        print(sorted(line.split(":")[0].strip()
                     for line in open("/proc/net/dev").read().splitlines()[2:]))
        print(open("/proc/net/route").read().count("\\n") - 1)
    """)
    assert r.status is ExecStatus.OK
    names, routes = r.stdout.splitlines()
    assert names == "['lo']"
    assert routes == "0"


def test_dns_resolution_fails(sandbox):
    r = run(sandbox, """
        import socket
        try:
            socket.getaddrinfo("example.com", 80)
            print("resolved")
        except OSError as e:
            print("blocked", type(e).__name__)
    """)
    assert r.status is ExecStatus.OK
    assert r.stdout.startswith("blocked")


def test_no_ip_or_netlink_socket_so_no_data_is_kept_outside_the_memory_limit(sandbox):
    """Data queued in an IP or netlink socket is kernel memory that the run's memory cgroup does
    not count: 300 MB held in loopback TCP buffers passed under a 128 MB limit with a peak of
    3.9 MB read, and a program keeping its 40 MB there was the leaner of two in a pair; UDP
    receive queues the same (red-team s35). A route-netlink socket answers a refused request
    with a copy of it: 100 MB of a program's data kept in those acknowledgements came back
    intact under a 64 MB limit, status ok, peak 1.6 MB (red-team s36). No task needs the
    jail's loopback or its interfaces, so no such socket opens."""
    r = run(sandbox, """
        import itertools, socket
        for family, kind in itertools.product(
                (socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK),
                (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_RAW)):
            try:
                socket.socket(family, kind, 0)
                print("opened")
            except OSError as e:
                print(e.errno)
    """)
    assert r.status is ExecStatus.OK, r
    assert r.stdout.split() == [str(errno.EAFNOSUPPORT)] * 9, r


def test_service_on_host_loopback_is_unreachable(sandbox):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    try:
        r = run(sandbox, f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=1)
                print("connected")
            except OSError as e:
                print("blocked", type(e).__name__)
        """)
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()
    assert r.stdout.startswith("blocked")
