"""Calls ringfeed knowing nothing of its schema but what server reflection
says, as grpcurl, evans and Postman do: lists the services, builds the
message classes from the descriptors the server sends, appends an event and
reads the status back. With --token-required it first checks that reflection
without a token is refused, then uses --token.

Needs grpcio and grpcio-reflection (.ci/run installs them)."""

import argparse
import sys

import grpc
from google.protobuf import descriptor_pool, message_factory
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)


class Bearer(grpc.UnaryUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds `authorization: Bearer TOKEN` to every call."""

    def __init__(self, token):
        self.metadata = [("authorization", "Bearer " + token)]

    def _details(self, details):
        return details._replace(metadata=list(details.metadata or []) + self.metadata)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_stream(self, continuation, details, requests):
        return continuation(self._details(details), requests)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--token")
    parser.add_argument("--token-required", action="store_true")
    args = parser.parse_args()

    plain = grpc.insecure_channel(args.server)
    if args.token_required:
        try:
            list(ProtoReflectionDescriptorDatabase(plain).get_services())
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAUTHENTICATED, e
            print("reflection without a token: refused,", e.code())
        else:
            sys.exit("reflection answered without a token on a server with tokens")
    channel = plain
    if args.token:
        channel = grpc.intercept_channel(plain, Bearer(args.token))

    db = ProtoReflectionDescriptorDatabase(channel)
    services = set(db.get_services())
    print("services:", sorted(services))
    for name in ["ringfeed.v1.RingFeed", "grpc.health.v1.Health"]:
        assert name in services, (name, services)

    pool = descriptor_pool.DescriptorPool(db)
    service = pool.FindServiceByName("ringfeed.v1.RingFeed")
    methods = {m.name for m in service.methods}
    for name in ["Append", "AppendStream", "Subscribe", "Status"]:
        assert name in methods, (name, methods)

    def unary(method_name):
        method = service.FindMethodByName(method_name)
        request = message_factory.GetMessageClass(method.input_type)
        response = message_factory.GetMessageClass(method.output_type)
        call = channel.unary_unary(
            "/%s/%s" % (service.full_name, method_name),
            request_serializer=request.SerializeToString,
            response_deserializer=response.FromString,
        )
        return request, call

    AppendRequest, append = unary("Append")
    request = AppendRequest()
    event = request.events.add()
    event.directory = "/reflected"
    event.new_entry.name = "by-reflection"
    ack = append(request)
    print("appended:", ack)

    StatusRequest, status = unary("Status")
    answer = status(StatusRequest())
    committed = sum(s.committed_next for s in answer.shards)
    assert committed == 1, answer
    assert len(answer.feed_id) == 16, answer
    print("status: %d shards, %d event(s), feed %s" % (len(answer.shards), committed, answer.feed_id))


if __name__ == "__main__":
    main()
