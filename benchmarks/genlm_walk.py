"""genlm-bytes' next-byte distributions along a text: the other side of ``python -m benchmarks strings genlm``.

This file is a **standalone script** for the Python environment where
``genlm-bytes`` is installed (``python genlm_walk.py JOB.json OUT.json``); it
imports nothing from ``ppl_tok``, and nothing in ``ppl_tok`` imports it
(:mod:`benchmarks.versus` runs it as a subprocess). It loads the same
transformers folder that ppl-tok scores with (``AsyncTransformer``, CPU, fp32),
starts after the same BOS token, builds ``ByteBeamState`` with
``BeamParams(K, prune_threshold)``, and for every byte ``x_k`` of the text
records ``log p(x_k | x_<k)`` from ``logp_next()`` before advancing with
``(beam.prune() << x_k)``, as genlm-bytes' own ``greedy``/``sample`` walk does.

The special tokens that ppl-tok treats as the end of the string are passed as
``eos_byte_strings``, so both libraries normalise over the same 257 outcomes
(256 bytes and the end). The job is JSON: ``model_dir``, ``bos_id``,
``text_hex``, ``K``, ``prune_threshold``, ``eos_ids``, ``threads``. The result
(written every ``checkpoint`` bytes, so a killed run keeps what it measured) has
``log_probs`` (one per byte walked), ``seconds`` and ``cpu_seconds`` (the walk, setup excluded),
``setup_seconds`` (model and trie), ``versions`` and ``done``.
"""

import asyncio
import json
import os
import sys
import time


def _write(path, result):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f)
    os.replace(tmp, path)


async def _walk(job, out_path):
    import torch
    from importlib.metadata import version

    torch.set_num_threads(int(job.get("threads", 1)))
    from genlm.backend.llm import AsyncTransformer
    from genlm.bytes import BeamParams, ByteBeamState

    start = time.perf_counter()
    llm = AsyncTransformer.from_name(job["model_dir"], hf_opts={"device_map": "cpu", "dtype": torch.float32})
    tokenizer = llm.tokenizer
    tokenizer.bos_token = tokenizer.convert_ids_to_tokens(job["bos_id"])  # genlm starts after tokenizer.bos_token_id
    if tokenizer.bos_token_id != job["bos_id"]:
        raise SystemExit(f"could not set the BOS id to {job['bos_id']} (got {tokenizer.bos_token_id})")
    eos = [llm.byte_vocab[i].byte_string for i in job["eos_ids"]]
    params = BeamParams(K=job["K"], prune_threshold=job["prune_threshold"], eos_byte_strings=eos)
    beam = await ByteBeamState.initial(llm, params)
    setup = time.perf_counter() - start
    text = bytes.fromhex(job["text_hex"])
    result = {"K": job["K"], "prune_threshold": job["prune_threshold"], "setup_seconds": setup,
              "versions": {p: version(p) for p in ("genlm-bytes", "genlm-backend", "torch", "transformers")},
              "log_probs": [], "seconds": 0.0, "cpu_seconds": 0.0, "done": False, "error": None}
    checkpoint = int(job.get("checkpoint", 50))
    start, cpu = time.perf_counter(), time.process_time()
    try:
        for k, b in enumerate(text):
            q = await beam.logp_next()
            result["log_probs"].append(float(q[b]))
            beam = await (beam.prune() << b)
            if len(beam) == 0:
                raise RuntimeError(f"the beam is empty after byte {k} ({bytes([b])!r})")
            if (k + 1) % checkpoint == 0:
                result["seconds"], result["cpu_seconds"] = time.perf_counter() - start, time.process_time() - cpu
                _write(out_path, result)
        result["done"] = True
    except Exception as err:  # recorded, not lost: the bytes walked so far stay in the result
        result["error"] = f"{type(err).__name__}: {err}"
    result["seconds"], result["cpu_seconds"] = time.perf_counter() - start, time.process_time() - cpu
    _write(out_path, result)
    await beam.cleanup()


def main(argv):
    if len(argv) != 3:
        print("usage: python genlm_walk.py JOB.json OUT.json", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        job = json.load(f)
    asyncio.run(_walk(job, argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
