#!/usr/bin/env python3
"""A ringfeed client in Python (grpcio), against a running, empty server.

Stubs are generated from the given ringfeed.proto at run time, so this checks
the wire contract as another language's protobuf stack sees it, not the Rust
bindings. It appends events (unary Append and pipelined AppendStream, with
entries, signatures, a rename, extended attributes, non-ASCII names), then
subscribes from the beginning up to the highest stamp returned and checks that
exactly the appended events come back, each once, equal field by field, at the
positions Append returned, in (ts, shard, offset) order; once one by one, once
with batching allowed, and once resumed from a cursor. A relative directory
must be refused with INVALID_ARGUMENT.

Usage: ringfeed_client_test.py --server HOST:PORT --proto path/to/ringfeed.proto
Exit status: 0 all checks passed; 1 a check failed; 2 grpcio or grpcio-tools
is missing (pip install grpcio grpcio-tools).
"""

import argparse
import importlib
import os
import subprocess
import sys
import tempfile

TIMEOUT_S = 60


class Failed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failed(message)


def generate_stubs(proto, out_dir):
    proto_dir, proto_file = os.path.split(os.path.abspath(proto))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{proto_dir}",
            f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            proto_file,
        ],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise Failed(f"protoc failed ({result.returncode}): {result.stderr.strip()}")
    sys.path.insert(0, out_dir)
    module = os.path.splitext(proto_file)[0]
    return importlib.import_module(f"{module}_pb2"), importlib.import_module(f"{module}_pb2_grpc")


def events_to_append(pb):
    return [
        pb.Event(
            directory="/py/a",
            new_entry=pb.Entry(name="f1", size=10, mode=0o100644),
            signatures=[7],
        ),
        pb.Event(
            directory="/py/a",
            old_entry=pb.Entry(name="f1", size=10),
            new_entry=pb.Entry(
                name="f1",
                size=20,
                mtime_ns=1_700_000_000_000_000_000,
                attributes=b"\x00\xffopaque",
                extended={"user.k": b"v", "user.empty": b""},
            ),
        ),
        pb.Event(directory="/py", new_entry=pb.Entry(name="b", is_directory=True)),
        pb.Event(
            directory="/py/b",
            old_entry=pb.Entry(name="g"),
            new_entry=pb.Entry(name="h"),
            new_parent_path="/py/c",
            signatures=[1, 2, 3],
        ),
        pb.Event(directory="/py/c", old_entry=pb.Entry(name="h")),
        pb.Event(directory="/py/\u00e9t\u00e9", new_entry=pb.Entry(name="\u00fc\u65e5")),
    ]


def append_all(pb, stub, events):
    """Appends the first two events with unary Append (durable), the rest one
    per request on one AppendStream; returns [(position, event)]."""
    acked = []
    unary = stub.Append(
        pb.AppendRequest(events=events[:2], durability=pb.DURABILITY_DURABLE),
        timeout=TIMEOUT_S,
    )
    check(len(unary.positions) == 2, f"Append: {len(unary.positions)} positions for 2 events")
    acked += zip(unary.positions, events[:2])

    requests = [pb.AppendRequest(events=[e], durability=pb.DURABILITY_MEMORY) for e in events[2:]]
    responses = list(stub.AppendStream(iter(requests), timeout=TIMEOUT_S))
    check(
        len(responses) == len(requests),
        f"AppendStream: {len(responses)} responses for {len(requests)} requests",
    )
    for response, event in zip(responses, events[2:]):
        check(len(response.positions) == 1, f"AppendStream: {len(response.positions)} positions for 1 event")
        acked.append((response.positions[0], event))

    keys = [(p.shard, p.offset) for p, _ in acked]
    check(len(set(keys)) == len(keys), f"two events got one position: {keys}")
    return acked


def subscribe(pb, stub, start, until_ns, batching):
    """Collects [(ts, shard, offset, event, cursor after it or None)] until the
    stream ends; a batch's cursor belongs to its last event only."""
    request = pb.SubscribeRequest(client_name="python client test", until_ns=until_ns, batching=batching, **start)
    delivered = []
    for response in stub.Subscribe(request, timeout=TIMEOUT_S):
        item = response.WhichOneof("item")
        if item == "event":
            messages = [response.event]
        elif item == "batch":
            check(batching, "a batch arrived although batching was not requested")
            check(len(response.batch.events) > 0, "an empty batch")
            messages = list(response.batch.events)
        elif item in ("heartbeat", "chunk_mode_end", None):
            continue
        else:
            raise Failed(f"unexpected item {item!r}")
        for i, m in enumerate(messages):
            cursor = response.cursor if i == len(messages) - 1 and response.cursor else None
            delivered.append((m.ts_ns, m.shard, m.offset, m.event, cursor))
    return delivered


def describe(event):
    names = (
        event.old_entry.name if event.HasField("old_entry") else None,
        event.new_entry.name if event.HasField("new_entry") else None,
    )
    return f"{event.directory} {names} -> {event.new_parent_path or '-'}"


def check_stream(label, delivered, expected):
    """`expected`: [(ts, shard, offset, event)] in delivery order."""
    got = [(ts, shard, offset, describe(e)) for ts, shard, offset, e, _ in delivered]
    want = [(ts, shard, offset, describe(e)) for ts, shard, offset, e in expected]
    check(got == want, f"{label}: delivered\n  {got}\nexpected\n  {want}")
    for (_, _, _, event, _), (_, _, _, appended) in zip(delivered, expected):
        # Field-by-field: entries, sizes, maps, bytes and signatures survive.
        check(event == appended, f"{label}: delivered {event} but appended {appended}")


def run(args):
    import grpc

    with tempfile.TemporaryDirectory(prefix="ringfeed-pystubs-") as out_dir:
        pb, pb_grpc = generate_stubs(args.proto, out_dir)
        if args.tls_ca:
            with open(args.tls_ca, "rb") as f:
                credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
            if args.token:
                # Sent as `authorization: Bearer TOKEN` on every call.
                credentials = grpc.composite_channel_credentials(
                    credentials, grpc.access_token_call_credentials(args.token)
                )
            channel = grpc.secure_channel(args.server, credentials)
        else:
            channel = grpc.insecure_channel(args.server)
        with channel:
            grpc.channel_ready_future(channel).result(timeout=TIMEOUT_S)
            stub = pb_grpc.RingFeedStub(channel)

            acked = append_all(pb, stub, events_to_append(pb))
            expected = sorted(
                ((p.ts_ns, p.shard, p.offset, e) for p, e in acked),
                key=lambda x: (x[0], x[1], x[2]),
            )
            until_ns = max(p.ts_ns for p, _ in acked)

            plain = subscribe(pb, stub, {"beginning": True}, until_ns, batching=False)
            check_stream("from the beginning", plain, expected)
            check(all(c for *_, c in plain), "an event response without a cursor")

            batched = subscribe(pb, stub, {"beginning": True}, until_ns, batching=True)
            check_stream("from the beginning, batching", batched, expected)

            # Resume after the second delivered event: exactly the rest.
            resumed = subscribe(pb, stub, {"cursor": plain[1][4]}, until_ns, batching=False)
            check_stream("resumed from a cursor", resumed, expected[2:])

            try:
                stub.Append(pb.AppendRequest(events=[pb.Event(directory="relative/dir")]), timeout=TIMEOUT_S)
                raise Failed("Append accepted a relative directory")
            except grpc.RpcError as e:
                check(
                    e.code() == grpc.StatusCode.INVALID_ARGUMENT,
                    f"relative directory: {e.code()} {e.details()!r}, expected INVALID_ARGUMENT",
                )
    return len(acked)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="HOST:PORT of a running, empty ringfeed server")
    parser.add_argument("--proto", required=True, help="path to ringfeed.proto")
    parser.add_argument("--tls-ca", help="connect over TLS, trusting this CA (PEM)")
    parser.add_argument("--token", help="with --tls-ca: send this token on every call")
    args = parser.parse_args()
    try:
        import grpc  # noqa: F401
        import grpc_tools.protoc  # noqa: F401
    except ImportError as e:
        print(f"ringfeed_client_test: {e}: pip install grpcio grpcio-tools", file=sys.stderr)
        return 2
    try:
        count = run(args)
    except Failed as e:
        print(f"ringfeed_client_test: FAILED: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # an RPC error or anything unexpected is a failure too
        print(f"ringfeed_client_test: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"ringfeed_client_test: ok: {count} events appended and delivered three ways")
    return 0


if __name__ == "__main__":
    sys.exit(main())
