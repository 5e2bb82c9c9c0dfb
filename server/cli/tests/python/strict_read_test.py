#!/usr/bin/env python3
"""Reads a ringfeed server's whole feed with Python's protobuf (upb), a
decoder stricter than prost, and prints what it read.

Subscribes from the beginning with batching and reads until COUNT events
arrived. Every SubscribeResponse is decoded by Python's protobuf, which
refuses the whole response when an event in it is malformed ("Wire format
was corrupt"), so one event that only prost reads stops this reader, as it
stopped every Python subscriber before issue 36. Prints one JSON line per
event: shard, offset, directory, the old and new entries' names and sizes,
and the signatures.

Usage: strict_read_test.py --server HOST:PORT --proto ringfeed.proto --count N
Exit status: 0 read them all; 1 a response failed to decode or the stream
ended early; 2 grpcio or grpcio-tools is missing.
"""

import argparse
import json
import sys
import tempfile

from ringfeed_client_test import Failed, generate_stubs

TIMEOUT_S = 120


def entry(e, present):
    if not present:
        return None
    return {"name": e.name, "size": e.size}


def run(args):
    import grpc

    with tempfile.TemporaryDirectory(prefix="ringfeed-pystubs-") as out_dir:
        pb, pb_grpc = generate_stubs(args.proto, out_dir)
        with grpc.insecure_channel(args.server) as channel:
            grpc.channel_ready_future(channel).result(timeout=TIMEOUT_S)
            stub = pb_grpc.RingFeedStub(channel)
            request = pb.SubscribeRequest(
                client_name="python strict reader", beginning=True, batching=True
            )
            read = 0
            stream = stub.Subscribe(request, timeout=TIMEOUT_S)
            try:
                for response in stream:
                    which = response.WhichOneof("item")
                    if which == "event":
                        events = [response.event]
                    elif which == "batch":
                        events = list(response.batch.events)
                    else:
                        continue
                    for m in events:
                        e = m.event
                        print(
                            json.dumps(
                                {
                                    "shard": m.shard,
                                    "offset": m.offset,
                                    "directory": e.directory,
                                    "old": entry(e.old_entry, e.HasField("old_entry")),
                                    "new": entry(e.new_entry, e.HasField("new_entry")),
                                    "signatures": list(e.signatures),
                                },
                                sort_keys=True,
                            )
                        )
                        read += 1
                    if read >= args.count:
                        stream.cancel()
                        return
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.CANCELLED and read >= args.count:
                    return
                raise Failed(f"the stream failed after {read} events: {e.code()}: {e.details()}")
            raise Failed(f"the stream ended after {read} of {args.count} events")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--proto", required=True)
    parser.add_argument("--count", required=True, type=int)
    args = parser.parse_args()
    try:
        import grpc  # noqa: F401
        import grpc_tools.protoc  # noqa: F401
    except ImportError as e:
        print(f"missing: {e} (pip install grpcio grpcio-tools)", file=sys.stderr)
        return 2
    try:
        run(args)
    except Failed as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
