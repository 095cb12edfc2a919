"""An edge or cloud node of a hierarchical cell: ``python -m workloads.hier.serve``.

It trains (or loads from the cache, ``nets.trained``) its tier's network on the fine
labels, then answers requests over TCP (``wire``) until the cell runner stops it (it is
not decisive: the cell ends when its end devices have streamed their shards). A
request carries a batch of uint8 images, or the features of the node's first
convolution (the privacy module, run on the device; with ``--privacy edge`` an edge node
runs the cloud's module and forwards the features); the reply carries the fine label
of every sample, which tier answered it, and the time this node and those above it
spent in their networks. Under ``early-exit`` an edge node answers the samples its
softmax is confident about and forwards the others to the cloud (when the cell has
one and the privacy module is off: with it, the edge holds only its own network's
features, which the cloud's network cannot take, and answers every sample).

Inference runs one request at a time (a lock: one compute thread, as on a device);
connections are served by a thread each, so that a request waits for the network, not
for another device's link.
"""

from __future__ import annotations

import argparse
import json
import os
import socketserver
import sys
import threading
import time

import numpy as np

from . import PLAN_ENV, Plan
from . import nets, schemes, wire


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workloads.hier.serve")
    parser.add_argument("--tier", choices=("edge", "cloud"), required=True)
    parser.add_argument("--index", type=int, default=0, help="the node's place in its tier")
    parser.add_argument("--host", default="127.0.0.1",
                        help="the node's own address, where its devices dial it")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data-dir", default=None)
    return parser.parse_args(argv)


class Tier:
    """This node's network and what it forwards to."""

    def __init__(self, args: argparse.Namespace, plan: Plan):
        import torch

        torch.set_num_threads(args.threads)
        self.tier, self.plan = args.tier, plan
        # --privacy edge: an edge node holds the cloud's network for its first convolution
        # (the module) and runs nothing else; the cloud runs the rest.
        self.module_only = plan.privacy_edge and args.tier == "edge"
        self.model = plan.models["cloud" if self.module_only else args.tier]
        self.net, self.train_s = nets.trained(self.model, "fine", plan.train_samples,
                                              plan.seed, args.data_dir)
        split = plan.privacy or plan.privacy_edge
        self.first, self.rest = nets.split_first_conv(self.net) if split else (None, None)
        self.lock = threading.Lock()
        # Only an edge node forwards, under early-exit or as the privacy module (module doc).
        cloud = plan.addresses.get("edge-cloud") or []
        self.forwards = (args.tier == "edge" and bool(cloud)
                         and ((plan.scheme == "early-exit" and not plan.privacy)
                              or self.module_only))
        self.cloud_address = cloud[args.index % len(cloud)] if cloud else ""

    def answer(self, header: dict, array: np.ndarray, cloud: wire.Link | None) -> dict:
        import torch

        from ..datasets import loader

        if self.module_only:
            return self._module(array, cloud)
        with self.lock, torch.no_grad():
            t0 = time.perf_counter()
            if header.get("kind") == "features":
                logits = self.rest(torch.from_numpy(np.array(array)))
            else:
                logits = self.net(torch.from_numpy(
                    loader.for_model(array, self.model, nets.DATASET)))
            probs = torch.softmax(logits, dim=1).numpy()
            infer_s = time.perf_counter() - t0
        fine = probs.argmax(axis=1)
        tiers = [self.tier] * len(fine)
        reply = {"infer_s": {self.tier: infer_s}, "images": {self.tier: len(fine)},
                 "bytes": {}}
        if self.forwards and cloud is not None:
            up = ~schemes.exits(probs, self.plan.threshold)
            if up.any():
                sent0, got0 = cloud.bytes_sent, cloud.bytes_received
                above, _ = cloud.request({"op": "infer", "kind": "images"}, array[up])
                fine[up] = above["fine"]
                for i, tier in zip(np.flatnonzero(up), above["tier"]):
                    tiers[i] = tier
                for key in ("infer_s", "images"):
                    for tier, value in above[key].items():
                        reply[key][tier] = reply[key].get(tier, 0) + value
                reply["bytes"] = {cloud.name: (cloud.bytes_sent - sent0
                                               + cloud.bytes_received - got0)}
        reply.update(fine=[int(v) for v in fine], tier=tiers)
        return reply

    def _module(self, array: np.ndarray, cloud: wire.Link) -> dict:
        """``--privacy edge``: the cloud network's first convolution on these images, its
        features sent on to the cloud, the cloud's reply with the module's time."""
        import torch

        from ..datasets import loader

        with self.lock, torch.no_grad():
            t0 = time.perf_counter()
            features = self.first(torch.from_numpy(
                loader.for_model(array, self.model, nets.DATASET))).numpy()
            privacy_s = time.perf_counter() - t0
        sent0, got0 = cloud.bytes_sent, cloud.bytes_received
        reply, _ = cloud.request({"op": "infer", "kind": "features"}, features)
        reply["bytes"] = {cloud.name: cloud.bytes_sent - sent0 + cloud.bytes_received - got0}
        reply["privacy_s"] = privacy_s
        return reply


def serve(args: argparse.Namespace, plan: Plan) -> None:
    tier = Tier(args, plan)

    class Handler(socketserver.BaseRequestHandler):
        def handle(self):
            cloud = (wire.Link("edge-cloud", tier.cloud_address, plan.delays.get("cloud", 0.0))
                     if tier.forwards else None)
            try:
                while True:
                    try:
                        header, array, _ = wire.recv(self.request)
                    except ConnectionError:
                        return  # the device is done
                    if header.get("op") == "ping":  # a device's link opening
                        wire.send(self.request, {})
                        continue
                    try:
                        reply = tier.answer(header, array, cloud)
                    except Exception as exc:  # noqa: BLE001 - the device reports it
                        reply = {"error": f"{type(exc).__name__}: {exc}"}
                    wire.send(self.request, reply)
            finally:
                if cloud is not None:
                    cloud.close()

    class Server(socketserver.ThreadingTCPServer):
        allow_reuse_address = True
        daemon_threads = True

    with Server((args.host, args.port), Handler) as server:
        print(json.dumps({"listening": args.port, "tier": args.tier, "model": tier.model,
                          "train_s": round(tier.train_s, 3)}), flush=True)
        server.serve_forever()


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    serve(args, Plan.from_env(os.environ[PLAN_ENV]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
