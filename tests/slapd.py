"""A throwaway OpenLDAP server (Debian's slapd) on loopback for the ldap usergroupresolver's tests,
with a few users and groups, and the secrets directory YuniKorn's resolver reads.

Skipped when slapd is not installed, unless KORRAL_REQUIRE_SLAPD is set (.ci/run sets it, after
installing slapd): then its absence is a failure, not a skip.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

BASE_DN = "dc=example,dc=com"
ADMIN = f"cn=admin,{BASE_DN}"
PASSWORD = "secret"
# user -> the groups it is a member of (group DNs are written "CN=..." and "cn=...", as both occur)
MEMBERS = {"alice": ["devs", "ops"], "bob": [], "carol": ["ops"]}

_CONF = """\
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
modulepath /usr/lib/ldap
moduleload back_mdb
moduleload memberof
pidfile {root}/slapd.pid
database mdb
maxsize 10485760
suffix "{base}"
rootdn "{admin}"
rootpw {password}
directory {root}/data
overlay memberof
"""


def _ldif() -> str:
    entries = [
        f"dn: {BASE_DN}\nobjectClass: dcObject\nobjectClass: organization\no: example\ndc: example\n",
        f"dn: ou=people,{BASE_DN}\nobjectClass: organizationalUnit\nou: people\n",
        f"dn: ou=groups,{BASE_DN}\nobjectClass: organizationalUnit\nou: groups\n",
    ]
    for user in MEMBERS:
        person = f"objectClass: inetOrgPerson\nuid: {user}\ncn: {user}\nsn: {user}\n"
        entries.append(f"dn: uid={user},ou=people,{BASE_DN}\n{person}")
    for index, group in enumerate(("devs", "ops")):
        rdn = "CN" if index == 0 else "cn"
        members = "".join(
            f"member: uid={user},ou=people,{BASE_DN}\n" for user, groups in MEMBERS.items() if group in groups
        )
        entries.append(
            f"dn: {rdn}={group},ou=groups,{BASE_DN}\nobjectClass: groupOfNames\ncn: {group}\n{members}"
        )
    return "\n".join(entries)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for(port: int, process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"slapd exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"slapd did not listen on port {port} within {timeout}s")


def write_secrets(directory: Path, **settings: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for key, value in settings.items():
        (directory / key).write_text(value + "\n")
    return directory


@contextmanager
def running_slapd(root: Path) -> Iterator[dict[str, str]]:
    """A slapd with MEMBERS loaded; yields YuniKorn's LDAP settings for it (key -> value)."""
    binary = shutil.which("slapd") or ("/usr/sbin/slapd" if Path("/usr/sbin/slapd").exists() else None)
    if binary is None or shutil.which("ldapadd") is None:
        if os.environ.get("KORRAL_REQUIRE_SLAPD"):
            pytest.fail("slapd and ldap-utils are required here (KORRAL_REQUIRE_SLAPD) but not installed")
        pytest.skip("slapd is not installed (apt-get install slapd ldap-utils)")
    (root / "data").mkdir(parents=True)
    conf = root / "slapd.conf"
    conf.write_text(_CONF.format(root=root, base=BASE_DN, admin=ADMIN, password=PASSWORD))
    port = _free_port()
    url = f"ldap://127.0.0.1:{port}/"
    process = subprocess.Popen(
        [binary, "-f", str(conf), "-h", url, "-d", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        _wait_for(port, process)
        (root / "data.ldif").write_text(_ldif())
        subprocess.run(
            ["ldapadd", "-x", "-H", url, "-D", ADMIN, "-w", PASSWORD, "-f", str(root / "data.ldif")],
            check=True,
            capture_output=True,
            timeout=60,
        )
        yield {
            "Host": "127.0.0.1",
            "Port": str(port),
            "BaseDN": BASE_DN,
            "Filter": "(&(objectClass=inetOrgPerson)(uid=%s))",
            "GroupAttr": "memberOf",
            "ReturnAttr": "memberOf",
            "BindUser": ADMIN,
            "BindPassword": PASSWORD,
        }
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
