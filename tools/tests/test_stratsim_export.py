#!/usr/bin/env python3
"""tools/stratsim-export against real PyTorch: the exported model and plan, planned by stratsim,
issue what PyTorch itself issues for the same nn.Module and parallelize function, collective by
collective. Needs PyTorch (the user's, never stratsim's dependency): without it every test is
skipped with a message and the process exits 77, which ctest reports as skipped.

    STRATSIM_BINARY=build/stratsim python tools/tests/test_stratsim_export.py
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
EXPORT = os.path.join(HERE, "..", "stratsim-export")
STRATSIM = os.environ.get("STRATSIM_BINARY", os.path.join(HERE, "..", "..", "build", "stratsim"))

try:
    import torch  # noqa: F401
except ImportError:
    print("SKIPPED: PyTorch is not installed for this Python; stratsim-export's tests need it "
          "(README: From an nn.Module). The C++ suite never does.")
    sys.exit(77)

sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "golden"))


def export(*args, cwd=HERE):
    return subprocess.run([sys.executable, EXPORT, *args], cwd=cwd, capture_output=True, text=True)


def stratsim_plan(model, plan, iterations):
    out = subprocess.run([STRATSIM, "plan", "--model", model, "--plan", plan, "--iterations", str(iterations),
                          "--json"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def load(path):
    with open(path) as f:
        return json.load(f)


def lines(records):
    return [f"{r['op']} [{r['group']}] {r['input_bytes']} -> {r['output_bytes']} B {r['dtype']}" for r in records]


class ExportTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="stratsim-export-")
        self.model = os.path.join(self.dir, "model.json")
        self.plan = os.path.join(self.dir, "plan.json")

    def test_module_tree_and_graph_forward(self):
        run = export("export_examples:llama", "layers=3", "--input-shape", "2,8", "--loss", "-o", self.model)
        self.assertEqual(run.returncode, 0, run.stderr)
        doc = load(self.model)
        self.assertEqual(doc["seq_len"], 8)
        block = doc["modules"][1]["children"][2]
        self.assertEqual(block["name"], "2")
        attention = block["children"][0]
        sdpa = [c for c in attention["children"] if c["type"] == "ScaledDotProductAttention"]
        self.assertEqual([(s["heads"], s["kv_heads"], s["head_dim"]) for s in sdpa], [(4, 2, 4)])
        self.assertEqual([s["op"] for s in block["forward"] if "op" in s], ["add", "add"])
        # stratsim reads it, with PyTorch's parameter count.
        from export_examples import llama
        report = stratsim_plan(self.model, "builtin:ddp", 1)
        self.assertEqual(report["model"]["parameters"], sum(p.numel() for p in llama(layers=3).parameters()))

    def test_plan_issues_what_pytorch_issues(self):
        """torchtitan's 2-D plan on dp 2 x tp 2: setup and two iterations, exact."""
        run = export("export_examples:llama", "--input-shape", "2,8", "--loss", "-o", self.model,
                     "--parallelize", "export_examples:torchtitan_parallelize", "--mesh", "2x2",
                     "--mesh-dim-names", "dp,tp", "--batch-size", "2", "--loss-parallel", "--plan-out", self.plan)
        self.assertEqual(run.returncode, 0, run.stderr)
        planned = stratsim_plan(self.model, self.plan, 2)
        recorded_setup, recorded = record_pytorch("llama", "torchtitan_parallelize")
        self.assertEqual(lines(planned["setup"]), lines(recorded_setup))
        for i, iteration in enumerate(recorded):
            self.assertEqual(lines(planned["iterations"][i]["collectives"]), lines(iteration), f"iteration {i + 1}")

    def test_torchtitans_own_model_code(self):
        """torchtitan's llama3 source (ModuleDict of blocks called with freqs_cis, complex rotary,
        repeat_kv, SDPA behind a module, `bs, seqlen, _ = x.shape`) with its apply_tp/apply_fsdp."""
        run = export("export_examples:titan", "--input-shape", "2,8", "--loss", "-o", self.model,
                     "--parallelize", "export_examples:titan_parallelize", "--mesh", "2x2",
                     "--mesh-dim-names", "dp,tp", "--batch-size", "2", "--loss-parallel", "--plan-out", self.plan)
        self.assertEqual(run.returncode, 0, run.stderr)
        attention = load(self.model)["modules"][1]["children"][0]["children"][0]
        self.assertEqual([s["call"] for s in attention["forward"]], ["wq", "wk", "wv", "rope", "rope_1", "sdpa", "wo"])
        steps = [next(iter(step)) for step in load(self.plan)["steps"]]
        self.assertEqual(steps.count("checkpoint"), 2)  # apply_ac's checkpoint_wrapper, per block
        planned = stratsim_plan(self.model, self.plan, 2)
        recorded_setup, recorded = record_pytorch("titan", "titan_parallelize")
        self.assertEqual(lines(planned["setup"]), lines(recorded_setup))
        for i, iteration in enumerate(recorded):
            self.assertEqual(lines(planned["iterations"][i]["collectives"]), lines(iteration), f"iteration {i + 1}")

    def test_activation_checkpointing_calls_are_recorded(self):
        """apply_activation_checkpointing (PyTorch bound its checkpoint_wrapper_fn default before
        the patch) and composable checkpoint() become `checkpoint` steps: the recomputed forwards'
        TP collectives are then what PyTorch issues. Composable checkpoint() on a module with a
        style hooks in after the style: the recomputation does not gather its input again."""
        cases = [("applied_ac_parallelize", [{"module": "layers.0"}, {"module": "layers.1"}]),
                 ("composable_ac_parallelize", [{"module": "layers.0.feed_forward", "api": "composable"}]),
                 ("composable_by_apply_parallelize",
                  [{"module": "layers.0", "api": "composable"}, {"module": "layers.1", "api": "composable"}]),
                 ("reentrant_ac_parallelize", [{"module": "layers.0", "use_reentrant": True},
                                               {"module": "layers.1", "use_reentrant": True}])]
        for parallelize, checkpointed in cases:
            with self.subTest(parallelize):
                run = export("export_examples:llama", "--input-shape", "2,8", "--loss", "-o", self.model,
                             "--parallelize", f"export_examples:{parallelize}", "--mesh", "2x2",
                             "--mesh-dim-names", "dp,tp", "--batch-size", "2", "--loss-parallel",
                             "--plan-out", self.plan)
                self.assertEqual(run.returncode, 0, run.stderr)
                steps = load(self.plan)["steps"]
                self.assertEqual([s["checkpoint"] for s in steps if "checkpoint" in s], checkpointed)
                planned = stratsim_plan(self.model, self.plan, 2)
                recorded_setup, recorded = record_pytorch("llama", parallelize)
                self.assertEqual(lines(planned["setup"]), lines(recorded_setup))
                for i, iteration in enumerate(recorded):
                    self.assertEqual(lines(planned["iterations"][i]["collectives"]), lines(iteration),
                                     f"iteration {i + 1}")

    def test_untraceable_containers_become_chains(self):
        run = export("export_examples:mlp", "--input-shape", "2,8", "-o", self.model)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("blocks.0: not traceable", run.stderr)
        doc = load(self.model)
        self.assertNotIn("forward", doc["modules"][0]["children"][0])  # Gated: its children in order
        self.assertEqual(doc["forward"][-1], {"call": "scale", "in": "head", "out": "mm"})  # torch.mm(x, self.scale)
        stratsim_plan(self.model, "builtin:ddp", 1)

    def test_bad_input_is_one_line_and_exit_2_with_nothing_written(self):
        cases = [
            (["nope:make"], "cannot import nope"),
            (["export_examples:with_conv"], "conv: Conv2d is not a leaf type stratsim knows"),
            (["export_examples:tied"], "output.weight is the same parameter as tok_embeddings.weight (tied)"),
            (["export_examples:own_linear"], "w: the forward uses it other than as torch.mm(x, self.w)"),
            (["export_examples:llama", "layers"], "expected key=value"),
            (["export_examples:llama", "--input-shape", "2,8", "--parallelize", "export_examples:bad_parallelize",
              "--mesh", "2",
              "--mesh-dim-names", "tp"], "PyTorch: NotImplementedError: ColwiseParallel currently only support "
                                        "nn.Linear and nn.Embedding!"),
        ]
        for args, message in cases:
            run = export(*args, "-o", self.model)
            self.assertEqual(run.returncode, 2, args)
            self.assertIn(message, run.stderr)
            self.assertEqual(len(run.stderr.strip().splitlines()), 1, run.stderr)
            self.assertFalse(os.path.exists(self.model), args)


def record_pytorch(factory, parallelize):
    """The same model and parallelize function in PyTorch, on CPU under the fake process group."""
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import loss_parallel
    from torch.testing._internal.distributed.fake_pg import FakeStore

    import export_examples
    from record_fsdp2 import CollectiveRecorder

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    try:
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        names = {mesh.get_group(n).group_name: n for n in ("dp", "tp")}
        model = getattr(export_examples, factory)()
        recorder = CollectiveRecorder(names)
        with recorder:
            getattr(export_examples, parallelize)(model, mesh)
        setup = list(recorder.records)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        iterations = []
        with recorder:
            for _ in range(2):
                start = len(recorder.records)
                tokens = torch.randint(0, 64, (2, 8))
                logits = model(tokens)
                with loss_parallel():
                    F.cross_entropy(logits.flatten(0, 1).float(), tokens.flatten(0, 1)).backward()
                optimizer.step()
                optimizer.zero_grad()
                iterations.append(recorder.records[start:])
        return setup, iterations
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    unittest.main()
