"""``korral serve``: a standalone core serving the SI over gRPC, and the REST API."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from korral.cli.config_input import naming, read_config, source_name
from korral.cli.group import fail, main
from korral.cli.options import address_option, config_option, count_option, input_file_option, pem_option
from korral.core import KORRAL_LIMITS
from korral.errors import ConfigError

if TYPE_CHECKING:  # grpc is imported when serving, not for every command's --help
    from korral.server.auth import ServerTls

DEFAULT_GRPC_ADDRESS = "127.0.0.1:9090"


@main.command(short_help="Serve a core: the SI over gRPC, and the REST API.")
@config_option(
    "a queues.yaml (or ConfigMap, - for stdin): validated at start-up, then the config of an RM "
    "that registers with an empty one"
)
@address_option(
    "--grpc", "grpc_address", "HOST:PORT of the gRPC SI (port 0: any free port)", default=DEFAULT_GRPC_ADDRESS
)
@address_option("--rest", "rest_address", "HOST:PORT of the REST API /ws/v1 (default: off)")
@pem_option("--rest-tls-cert", "serve REST over HTTPS: PEM certificate")
@pem_option("--rest-tls-key", "the certificate's PEM private key")
@pem_option("--rest-tls-client-ca", "REST clients need a certificate it signed")
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
)
@input_file_option("--grpc-tls-cert", "gRPC TLS: the server's certificate chain (PEM)")
@input_file_option("--grpc-tls-key", "gRPC TLS: the server's private key (PEM)")
@input_file_option(
    "--grpc-tls-client-ca", "gRPC mutual TLS: clients must present a certificate signed by this CA (PEM)"
)
@input_file_option(
    "--grpc-token-file",
    "YAML/JSON rmID -> secret: every gRPC call for an RM must carry 'authorization: Bearer <secret>'",
)
@count_option(
    "--max-rms",
    "resource managers registered at once; one more is refused with RESOURCE_EXHAUSTED",
    default=KORRAL_LIMITS["max_rms"],
)
@count_option(
    "--max-partitions",
    "partitions over all RMs; a registration or config update past it is refused",
    default=KORRAL_LIMITS["max_partitions"],
)
@count_option(
    "--actor-threads",
    "threads of each of the four tiers of workers the actors run on (at most 4x this in all)",
    default=KORRAL_LIMITS["actor_threads"],
)
@count_option(
    "--max-in-flight",
    "an RM's items (asks, releases, nodes, applications) in the core not yet handled; past it the"
    " server reads that RM's next request once the core has caught up",
    default=KORRAL_LIMITS["max_in_flight"],
)
def serve(
    config: Path | None,
    grpc_address: str,
    rest_address: str | None,
    log_level: str,
    rest_tls_cert: str | None = None,
    rest_tls_key: str | None = None,
    rest_tls_client_ca: str | None = None,
    grpc_tls_cert: Path | None = None,
    grpc_tls_key: Path | None = None,
    grpc_tls_client_ca: Path | None = None,
    grpc_token_file: Path | None = None,
    max_rms: int = KORRAL_LIMITS["max_rms"],
    max_partitions: int = KORRAL_LIMITS["max_partitions"],
    actor_threads: int = KORRAL_LIMITS["actor_threads"],
    max_in_flight: int = KORRAL_LIMITS["max_in_flight"],
) -> None:
    """A standalone korral core serving the SI over gRPC; SIGINT or SIGTERM stops it cleanly."""
    import contextlib
    import signal
    import threading

    import korral
    from korral.server import serve_log
    from korral.server.switch_interval import SERVING_SWITCH_INTERVAL

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serve_log.configure()
    rest_tls = None
    if rest_tls_cert or rest_tls_key or rest_tls_client_ca:
        if not (rest_tls_cert and rest_tls_key):
            fail("REST over TLS needs both --rest-tls-cert and --rest-tls-key")
        if rest_address is None:
            fail("the --rest-tls-* options are for the REST API: give --rest HOST:PORT")
        rest_tls = {"cert": rest_tls_cert, "key": rest_tls_key, "client_ca": rest_tls_client_ca}
    default_config = ""
    if config is not None:
        try:
            default_config, _ = read_config(config)
            korral.load_config(default_config)
        except ConfigError as error:
            fail(f"invalid configuration: {naming(error, source_name(config))}")
    if rest_address is not None:
        from korral.errors import MissingExtraError
        from korral.extras import require_serve_extra

        try:  # before anything listens: the user learns what to install, not a traceback
            require_serve_extra()
        except MissingExtraError as error:
            fail(str(error))
    tls, tokens = grpc_security(grpc_tls_cert, grpc_tls_key, grpc_tls_client_ca, grpc_token_file)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    # the process is korral's alone: tune the collector for a long-lived core and, while REST serves,
    # hand the GIL to its event loop sooner (docs/architecture.md, "Process-wide settings")
    core = serve_log.logging_registrations(
        korral.start(
            tune_gc=True,
            max_rms=max_rms,
            max_partitions=max_partitions,
            actor_threads=actor_threads,
            max_in_flight=max_in_flight,
        )
    )
    try:
        bound = core.serve_grpc(grpc_address, default_config=default_config, tls=tls, tokens=tokens)
        click.echo(f"korral: gRPC SI listening on {bound}")
        if rest_address is not None:
            url = core.serve_rest(rest_address, tls=rest_tls, switch_interval=SERVING_SWITCH_INTERVAL)
            click.echo(f"korral: REST API at {url}")
        sys.stdout.flush()
        while not stop.wait(1.0):
            pass
        click.echo("korral: stopping")
        # deliver what the core has decided before the streams close
        with contextlib.suppress(TimeoutError):
            core.wait_until_idle(timeout=10.0)
    except (OSError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    finally:
        core.stop()
    click.echo("korral: stopped")


def grpc_security(
    cert: Path | None, key: Path | None, client_ca: Path | None, token_file: Path | None
) -> tuple[ServerTls | None, dict[str, str] | None]:
    """serve_grpc's tls and tokens from korral serve's flags, checked before the core starts."""
    from korral.server.auth import ServerTls, load_tokens

    if (cert is None) != (key is None) or (client_ca is not None and cert is None):
        fail("--grpc-tls-cert and --grpc-tls-key go together (--grpc-tls-client-ca needs both)")
    tls: ServerTls | None = None
    tokens: dict[str, str] | None = None
    try:
        if cert is not None and key is not None:
            tls = ServerTls(cert_file=cert, key_file=key, client_ca_file=client_ca)
            tls.credentials()
        if token_file is not None:
            tokens = load_tokens(token_file)
    except ValueError as error:
        fail(str(error))
    return tls, tokens
