"""A real Triton Inference Server for the tests and the benchmark: pytriton's `tritonserver` serving
ONNX models as Python callables around ONNX Runtime, with Triton's dynamic batcher in front.

Runs in its own venv (tests.support.components.triton_venv: pytriton needs numpy<2), so it imports
nothing of framewire. The parent picks the ports and the access token; `tests/support/triton.py`
starts it, waits for it and cleans up after it.

    python triton_server.py --model NAME=PATH.onnx [--model ...] --grpc-port P --http-port P
        --metrics-port P --token T [--max-batch 8] [--delay-us 2000] [--instances 1] [--threads 1]
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np
import onnxruntime as ort
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(int16)": np.int16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(bool)": np.bool_,
}


def _session(path: Path, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _tensors(args: list[ort.NodeArg], batching: bool) -> list[Tensor]:
    """Triton's view of the ONNX tensors: the batch dim left out when Triton batches."""
    out = []
    for arg in args:
        dims = arg.shape[1:] if batching else arg.shape
        shape = tuple(d if isinstance(d, int) else -1 for d in dims)
        out.append(Tensor(name=arg.name, dtype=_DTYPES[arg.type], shape=shape))
    return out


def _callable(session: ort.InferenceSession):  # type: ignore[no-untyped-def]
    names = [o.name for o in session.get_outputs()]

    @batch
    def infer(**inputs: np.ndarray) -> dict[str, np.ndarray]:
        values = session.run(names, inputs)
        return dict(zip(names, values))

    return infer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True, help="NAME=PATH.onnx (repeatable)")
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--token", required=True, help="access token of the restricted endpoints")
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--delay-us", type=int, default=2000, help="dynamic batcher's max queue delay")
    parser.add_argument("--instances", type=int, default=1, help="model instances (sessions) per model")
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads per session")
    parser.add_argument("--workspace", default=None, help="pytriton's workspace folder")
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"), help="gRPC over TLS with this PEM pair")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    config = TritonConfig(
        grpc_address="127.0.0.1",
        grpc_port=args.grpc_port,
        http_address="127.0.0.1",
        http_port=args.http_port,
        metrics_address="127.0.0.1",
        metrics_port=args.metrics_port,
        exit_on_error=True,
        **({"grpc_use_ssl": True, "grpc_server_cert": Path(args.tls[0]), "grpc_server_key": Path(args.tls[1])}
           if args.tls else {}),
    )
    security = TritonSecurityConfig(access_token=args.token)
    with Triton(config=config, workspace=args.workspace, security_config=security) as triton:
        for item in args.model:
            name, _, path = item.partition("=")
            sessions = [_session(Path(path), args.threads) for _ in range(args.instances)]
            first = sessions[0].get_inputs()[0].shape[0]
            batching = not isinstance(first, int) and args.max_batch > 0
            triton.bind(
                model_name=name,
                infer_func=[_callable(s) for s in sessions],
                inputs=_tensors(sessions[0].get_inputs(), batching),
                outputs=_tensors(sessions[0].get_outputs(), batching),
                config=ModelConfig(
                    batching=batching,
                    max_batch_size=args.max_batch if batching else 0,
                    batcher=DynamicBatcher(max_queue_delay_microseconds=args.delay_us),
                ),
                strict=True,
            )
        triton.serve()


if __name__ == "__main__":
    main()
