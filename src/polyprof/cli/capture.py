"""polyprof capture: record the next N ms of running processes, on demand."""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from ..errors import CaptureError
from .common import Subparsers, positive, seconds


#: what ``polyprof capture --help`` ends with
EXAMPLES = [
    ("polyprof capture 127.0.0.1:9012 -o c.polyprof",
     "the next second of a process started with `polyprof run --serve 127.0.0.1:9012`"),
    ("polyprof capture -d 5000 host1:9012,host2:9012 -o caps/",
     "5 s of two processes over the same interval, one file each"),
    ("polyprof capture localhost:9012 --logdir logs/",
     "a JAX or TensorFlow profiler server's capture, for XProf/TensorBoard"),
]


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "capture", examples=EXAMPLES, allow_abbrev=False,  # no `--token SECRET` taken for --token-file
        help="capture running processes that serve captures (polyprof, TensorFlow, JAX)",
        description="Capture the next --duration-ms of one or several running processes that serve "
                    "the ProfilerService protocol: `polyprof run --serve`, POLYPROF_SERVE, "
                    "polyprof.serve(), tf.profiler.experimental.server.start(), "
                    "jax.profiler.start_server(). All addresses are captured over the same "
                    "interval. The shared token, if the server needs one, comes from "
                    "$POLYPROF_SERVE_TOKEN or the file in $POLYPROF_SERVE_TOKEN_FILE (or --token-file), "
                    "never from the command line. Each capture is written on its own; one that polyprof cannot "
                    "read is a failure, its XSpace kept as received (docs/capture.md). Exit code 0 if "
                    "every capture succeeded, else 1.")
    p.add_argument("addresses", metavar="HOST:PORT[,HOST:PORT...]",
                   help="the servers to capture (comma-separated)")
    p.add_argument("-d", "--duration-ms", type=positive, default=1000, help="how long to record (default 1000)")
    p.add_argument("-o", "--output",
                   help="one address: the file to write (.polyprof; .xplane.pb for the XSpace as "
                        "received; another ending picks its format, as for export: .json.gz, .pftrace, "
                        ".parquet...; default capture.polyprof); several: a directory that gets one file "
                        "per process, <host>-<pid>-rank<r> (a TensorFlow/JAX server: "
                        "<host>-port<port>-rank<r>; default capture/)")
    p.add_argument("--overwrite", action="store_true",
                   help="several addresses (or --logdir): replace an earlier capture's files in the directory; "
                        "without it a directory that holds anything is refused, before capturing (its files "
                        "would be read as ranks of this capture)")
    p.add_argument("--logdir", help="instead of -o: write <logdir>/plugins/profile/<session>/<process>.xplane.pb "
                                    "for XProf or TensorBoard")
    p.add_argument("-f", "--format", choices=["polyprof", "xspace", "xplane"],
                   help="file format for several processes: polyprof (default) or xspace, the XSpace as "
                        "received (the name `polyprof export -f` uses; xplane: the same)")
    p.add_argument("--session-id", help="the capture's name (default: the time, as XProf names runs)")
    p.add_argument("--token-file", help="file holding the shared token")
    p.add_argument("--tls-ca", help="PEM file of the CA that signed the server's certificate (enables TLS)")
    p.add_argument("--tls-cert", help="PEM client certificate, for servers that require one")
    p.add_argument("--tls-key", help="PEM key of --tls-cert")
    p.add_argument("--grace", type=seconds, default=90.0, metavar="S",
                   help="seconds to wait for the answer after the duration (default 90)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..capture import client, output
    from ..capture.security import TLSFiles, read_token

    addresses = [a.strip() for a in args.addresses.split(",") if a.strip()]
    token = read_token(args.token_file)
    tls = None
    if args.tls_ca or args.tls_cert or args.tls_key:
        if bool(args.tls_cert) != bool(args.tls_key):
            raise CaptureError("--tls-cert and --tls-key go together")
        tls = TLSFiles(cert=args.tls_cert, key=args.tls_key, ca=args.tls_ca)
    session_id = args.session_id or time.strftime("%Y_%m_%d_%H_%M_%S")
    if args.logdir and args.output:
        raise CaptureError("-o and --logdir both name where to write: give one")
    if args.logdir:
        output.check_dir(output.logdir_run(Path(args.logdir), session_id), args.overwrite)
    elif len(addresses) > 1:
        output.check_dir(Path(args.output or "capture"), args.overwrite)
    else:
        _check_file(Path(args.output or "capture.polyprof"))
    try:
        with _progress(args.duration_ms, len(addresses)):
            captures = client.capture(addresses, args.duration_ms, token=token, tls=tls, session_id=session_id,
                                      grace_s=args.grace)
    except KeyboardInterrupt:
        raise CaptureError("interrupted: the captures were cancelled and the servers stopped recording") from None
    if args.logdir:
        written = output.write_logdir(captures, Path(args.logdir), session_id, args.overwrite)
    elif len(addresses) == 1:
        from ..collect.output import say_native  # (one file: what its name's ending gets, said as run says it)

        path = Path(args.output or "capture.polyprof")
        written = output.write_one(captures[0], path, output.format_for(path))
        for _, at, _ in written:
            if output.format_for(path) != "xplane":
                say_native(path, at)
    else:
        fmt = "xplane" if args.format in ("xspace", "xplane") else "polyprof"  # output.py's name for XSpace bytes
        written = output.write_set(captures, Path(args.output or "capture"), fmt, args.overwrite)
    for c, path, n in written:
        print(f"polyprof: captured {c.address} -> {path} ({n} events)", file=sys.stderr)
        if c.cut:
            print(f"polyprof: warning: {c.address}: {c.cut}", file=sys.stderr)
    if len(written) > 1 and not args.logdir:
        print(f"polyprof: the ranks of one job: polyprof summary {written[0][1].parent}", file=sys.stderr)
    failed = [c for c in captures if not c.ok or c.error is not None]  # (error: one polyprof could not read or write)
    for c in failed:
        print(f"polyprof: error: {c.address}: {c.error}", file=sys.stderr)
    return 1 if failed else 0


def _check_file(path: Path) -> None:
    """Refuse, before capturing, an output a file is at that is no trace of the format its
    name asks for, nor polyprof's (a user's config, notes, data set), as ``polyprof run``
    refuses it (collect/output.not_ours): before, a capture replaced it."""
    from ..collect.output import not_ours  # (one address: its output looked at before capturing)

    what = not_ours(path)
    if what is not None:
        raise CaptureError(f"{path} is there and is not {what}: refusing to replace it; choose another output (-o) "
                           "or remove it")


def _progress(duration_ms: int, n: int) -> Any:
    if not sys.stderr.isatty():
        return nullcontext()
    from rich.console import Console

    what = f"{n} processes" if n > 1 else "1 process"
    return Console(stderr=True).status(f"capturing {what} for {duration_ms / 1000:g} s ...")
