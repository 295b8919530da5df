#!/usr/bin/env python3
"""Interoperability: a client we did not write talks to `subternary serve`.

Uses Debian's python3-zmq and python3-protobuf with message classes that
protoc generates from proto/subternary.proto at test time (into a temporary
directory; nothing generated is kept).  Starts the server on a free tcp port,
streams greedy requests (token ids and text) and compares the ids with
`subternary generate --ids`; sends a request of an unsupported version and a
malformed one, asks for stats and health, cancels a long request, and stops the
server with SIGTERM.

usage: test_interop.py --exe build/subternary [--shared ../shared]
Exit status 0 when every check holds.
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

import zmq

VERSION = b"ST01"
PROMPT = [1, 300, 436, 102, 468, 497, 279, 476, 186, 242, 27]


def load_classes(tmp, root):
    subprocess.run(["protoc", "--python_out=" + tmp, "-I" + os.path.join(root, "proto"),
                    os.path.join(root, "proto", "subternary.proto")], check=True)
    sys.path.insert(0, tmp)
    import subternary_pb2  # noqa: E402  (generated just now)
    return subternary_pb2


def reference(exe, models, args):
    out = subprocess.run([exe, "generate", "-m", models[0], "-d", models[1], "--workers", "2"] + args + ["--ids"],
                         check=True, capture_output=True, text=True).stdout
    return [int(x) for x in out.strip().splitlines()[-1].split(",")]


def recv_env(pb, sock, timeout_ms=30000):
    if not sock.poll(timeout_ms):
        raise AssertionError("no reply within %d ms" % timeout_ms)
    frames = sock.recv_multipart()
    assert len(frames) == 2, "a reply is [version, payload]: %d frames" % len(frames)
    assert frames[0] == VERSION, frames[0]
    env = pb.Envelope()
    env.ParseFromString(frames[1])
    return env


def send_env(sock, env):
    sock.send_multipart([VERSION, env.SerializeToString()])


def stream(pb, sock, request_id):
    """Collects one request's chunks; returns (ids, text, final envelope)."""
    ids, text = [], b""
    while True:
        env = recv_env(pb, sock)
        kind = env.WhichOneof("msg")
        body = getattr(env, kind)
        assert body.request_id == request_id, (body.request_id, request_id)
        if kind == "chunk":
            assert body.offset == len(ids), "chunk offset %d after %d ids" % (body.offset, len(ids))
            ids.extend(body.ids)
            text += body.text
        elif kind in ("done", "error"):
            return ids, text, env
        else:
            raise AssertionError("unexpected " + kind)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", required=True)
    ap.add_argument("--shared", default=os.environ.get("ST_SHARED", "../shared"))
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    models = [os.path.join(a.shared, "models", "pico-target.q8_0.gguf"),
              os.path.join(a.shared, "models", "pico-draft.q4_0.gguf")]
    with tempfile.TemporaryDirectory() as tmp:
        pb = load_classes(tmp, root)
        server = subprocess.Popen([a.exe, "serve", "--target", models[0], "--draft", models[1], "--workers", "2",
                                   "--slots", "2", "--queue", "4", "--listen", "tcp://127.0.0.1:*"],
                                  stdout=subprocess.PIPE, stderr=open(os.path.join(tmp, "server.log"), "w"), text=True)
        try:
            line = server.stdout.readline()
            assert line.startswith("listening on "), "server said %r" % line
            endpoint = line.split()[-1]
            ctx = zmq.Context()
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(endpoint)

            # Health first (the connection is up once it answers).
            env = pb.Envelope()
            env.health_request.SetInParent()
            send_env(sock, env)
            h = recv_env(pb, sock).health
            assert h.ok and h.workers_ready == h.workers_total == 2, h

            # Greedy on token ids: the same ids as `subternary generate`.
            want = reference(a.exe, models, ["--tokens", ",".join(map(str, PROMPT)), "-n", "48"])
            env = pb.Envelope()
            g = env.generate
            g.request_id = "py-ids"
            g.prompt_ids.extend(PROMPT)
            g.max_tokens = 48
            send_env(sock, env)
            ids, text, final = stream(pb, sock, "py-ids")
            assert final.WhichOneof("msg") == "done", final
            assert ids == want, "ids %s\nwant %s" % (ids, want)
            assert final.done.tokens == len(ids) and final.done.prompt_tokens == len(PROMPT)
            assert final.done.reason in (pb.FINISH_LENGTH, pb.FINISH_EOS)
            assert len(text) > 0

            # Text prompt, tokenized by the server like generate -p does.
            want = reference(a.exe, models, ["-p", "Once upon a time", "-n", "24"])
            env = pb.Envelope()
            g = env.generate
            g.request_id = "py-text"
            g.prompt_text = "Once upon a time"
            g.add_bos = True
            g.max_tokens = 24
            send_env(sock, env)
            ids, _, final = stream(pb, sock, "py-text")
            assert final.WhichOneof("msg") == "done" and ids == want, (ids, want)

            # An unsupported version, a malformed payload, an invalid field.
            sock.send_multipart([b"ST99", b"\x00"])
            err = recv_env(pb, sock).error
            assert err.code == pb.ERR_UNSUPPORTED_VERSION, err
            sock.send_multipart([VERSION, b"\x00\x01\x02"])
            err = recv_env(pb, sock).error
            assert err.code == pb.ERR_MALFORMED, err
            env = pb.Envelope()
            env.generate.request_id = "py-bad"
            env.generate.prompt_ids.extend(PROMPT)
            env.generate.sampling.top_p = 2.0
            send_env(sock, env)
            err = recv_env(pb, sock).error
            assert err.code == pb.ERR_INVALID_FIELD and err.request_id == "py-bad", err

            # Cancel a long request once it streams.
            env = pb.Envelope()
            env.generate.request_id = "py-long"
            env.generate.prompt_ids.extend(PROMPT)
            env.generate.max_tokens = 3000
            env.generate.ignore_eos = True
            send_env(sock, env)
            first = recv_env(pb, sock)
            assert first.WhichOneof("msg") == "chunk", first
            env = pb.Envelope()
            env.cancel.request_id = "py-long"
            send_env(sock, env)
            while True:
                env = recv_env(pb, sock)
                if env.WhichOneof("msg") != "chunk":
                    break
            assert env.WhichOneof("msg") == "error" and env.error.code == pb.ERR_CANCELLED, env

            # Stats.
            env = pb.Envelope()
            env.stats_request.SetInParent()
            send_env(sock, env)
            st = recv_env(pb, sock).stats
            assert st.requests_done == 2 and st.requests_cancelled == 1, st
            assert st.sessions == 0 and st.slots == 2 and st.errors == 4, st
            assert len(st.nodes) == 1 and st.nodes[0].workers == 2, st
            sock.close()
            ctx.term()
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                rc = server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                rc = -1
        if rc != 0:
            sys.stderr.write(open(os.path.join(tmp, "server.log")).read())
        assert rc == 0, "server exit status %s" % rc
    print("python interop: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
