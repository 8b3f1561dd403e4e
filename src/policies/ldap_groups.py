"""The ``ldap`` usergroupresolver: a user's groups from an LDAP server, with YuniKorn's settings.

YuniKorn (``usergroup_ldap_resolver.go``) reads its settings from one file per key in a secrets
directory (``/run/secrets/ldap`` there; korral reads ``$KORRAL_LDAP_SECRETS``, else the same path):
``Host``, ``Port``, ``BaseDN``, ``Filter`` (with one ``%s`` for the user), ``GroupAttr``,
``ReturnAttr`` (comma-separated), ``BindUser``, ``BindPassword`` are required, ``SSL`` and
``Insecure`` (skip certificate checks) optional. For a user it binds, searches the base DN's subtree
with the filter, and gives the user a group named as the user first, then the ``CN`` of every
``memberOf`` value of the entries found.

Where korral differs: settings missing or invalid reject the applications that need them, with the
reason (YuniKorn stops the process at startup); the user name is escaped before it goes into the
filter (YuniKorn pastes it in as is); a ``memberOf`` value's first RDN is read case-insensitively
(OpenLDAP writes ``cn=``; YuniKorn only splits on ``CN=``). The connection has a 10 s timeout.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import attrs

LDAP_SECRETS_ENV = "KORRAL_LDAP_SECRETS"
DEFAULT_SECRETS_DIR = "/run/secrets/ldap"
REQUIRED = ("Host", "Port", "BaseDN", "Filter", "GroupAttr", "ReturnAttr", "BindUser", "BindPassword")
TIMEOUT = 10  # seconds (an int: ldap3 packs it into a socket option)


class LdapError(Exception):
    """The LDAP settings or the server could not give a user's groups; the message says why."""


@attrs.frozen
class LdapSettings:
    host: str
    port: int
    base_dn: str
    filter: str
    group_attr: str
    return_attr: tuple[str, ...]
    bind_user: str
    bind_password: str
    insecure: bool = False
    ssl: bool = False


def _bool(key: str, text: str) -> bool:
    # Go's strconv.ParseBool
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise LdapError(f"LDAP setting {key}: {text!r} is not a boolean")


def read_settings(directory: str | None = None) -> LdapSettings:
    """The settings in the secrets directory; LdapError names what is missing or invalid."""
    where = Path(directory or os.environ.get(LDAP_SECRETS_ENV) or DEFAULT_SECRETS_DIR)
    if not where.is_dir():
        raise LdapError(f"LDAP settings directory {where} does not exist")
    values: dict[str, str] = {}
    for entry in where.iterdir():
        if entry.name.startswith("..") or entry.is_dir():
            continue  # Kubernetes' secret metadata
        values[entry.name] = entry.read_text().strip()
    missing = [key for key in REQUIRED if not values.get(key)]
    if missing:
        raise LdapError(f"LDAP settings in {where} lack {', '.join(missing)}")
    try:
        port = int(values["Port"])
    except ValueError:
        raise LdapError(f"LDAP setting Port: {values['Port']!r} is not a number") from None
    if not 1 <= port <= 65535:
        raise LdapError(f"LDAP setting Port: {port} is not between 1 and 65535")
    if values["Filter"].count("%s") != 1:
        raise LdapError("LDAP setting Filter must hold one '%s' for the user name")
    return LdapSettings(
        host=values["Host"],
        port=port,
        base_dn=values["BaseDN"],
        filter=values["Filter"],
        group_attr=values["GroupAttr"],
        return_attr=tuple(part.strip() for part in values["ReturnAttr"].split(",") if part.strip()),
        bind_user=values["BindUser"],
        bind_password=values["BindPassword"],
        insecure=_bool("Insecure", values["Insecure"]) if "Insecure" in values else False,
        ssl=_bool("SSL", values["SSL"]) if "SSL" in values else False,
    )


def _common_name(dn: str) -> str | None:
    first = dn.split(",", 1)[0].strip()
    key, _, value = first.partition("=")
    return value.strip() if key.strip().lower() == "cn" and value.strip() else None


def ldap_groups(settings: LdapSettings, user: str) -> tuple[str, ...]:
    """The user's groups from the server: a group named as the user, then its memberOf groups."""
    try:
        import ldap3
        from ldap3.core.exceptions import LDAPException
        from ldap3.utils.conv import escape_filter_chars
    except ImportError:
        raise LdapError("the ldap usergroupresolver needs ldap3: pip install 'korral[ldap]'") from None
    tls = ldap3.Tls(validate=ssl.CERT_NONE if settings.insecure else ssl.CERT_REQUIRED)
    server = ldap3.Server(
        settings.host, port=settings.port, use_ssl=settings.ssl, tls=tls, connect_timeout=TIMEOUT
    )
    try:
        connection = ldap3.Connection(
            server,
            user=settings.bind_user,
            password=settings.bind_password,
            auto_bind=True,
            receive_timeout=TIMEOUT,
            read_only=True,
        )
        try:
            connection.search(
                settings.base_dn,
                settings.filter.replace("%s", escape_filter_chars(user)),
                search_scope=ldap3.SUBTREE,
                attributes=list(settings.return_attr),
            )
            entries = list(connection.response or ())
        finally:
            connection.unbind()
    except (LDAPException, OSError) as error:
        raise LdapError(
            f"LDAP lookup of user {user} at {settings.host}:{settings.port} failed: {error}"
        ) from None
    groups = [user]
    for entry in entries:
        attributes = entry.get("attributes") or {}
        values: object = next((v for k, v in attributes.items() if k.lower() == "memberof"), [])
        for dn in [values] if isinstance(values, str) else values if isinstance(values, list) else []:
            name = _common_name(str(dn))
            if name is not None:
                groups.append(name)
    return tuple(groups)
