"""The model zoo: every model name the bundled traces use, mapped to the nearest measured job
type of each source. Nothing here is a measurement; each entry says where its numbers come from.

| zoo model | scaling (Pollux app) | GPU-type speed and co-location (Gavel job type) | co-location (Blox) | memory |
|---|---|---|---|---|
| resnet18 | cifar10 (ResNet-18 on CIFAR-10: the same network) | ResNet-18 | - | SJF-BSBF testbed |
| shufflenet_v2_x1_0 | cifar10 (small CNN on CIFAR-10) | ResNet-18 (small CNN) | - | SJF-BSBF testbed |
| vgg16, vgg19 | imagenet (ResNet-50: large CNN on images) | ResNet-50 | vgg19 | SJF-BSBF testbed |
| dqn, a2c | ncf (small model, short steps; no RL job was measured for scaling) | A3C (RL) | - | SJF-BSBF testbed |
| bert | bert (BERT fine-tuning) | Transformer | - | SJF-BSBF testbed |
| gpt2 | bert (nearest transformer measured for scaling) | LM | - | SJF-BSBF testbed |
| cifar10 | cifar10 | ResNet-18 | - | as resnet18 (same network) |
| imagenet | imagenet | ResNet-50 | resnet50 | unknown |
| deepspeech2 | deepspeech2 | LM (recurrent, nearest) | - | unknown |
| yolov3 | yolov3 | ResNet-50 (CNN, nearest) | - | unknown |
| ncf | ncf | Recommendation (collaborative filtering) | - | unknown |

Memory: the SJF-BSBF authors' testbed footprints (PAPERS.md: MB at the batch listed, measured on
RTX A6000), split into a fixed part (weights, gradients and optimizer state: published parameter
count x 4 bytes x (2 + optimizer states)) and a per-sample part (the rest, divided by the
batch). Parameter counts: torchvision's model docs (ResNet-18 11.69 M, ShuffleNet-v2 x1.0
2.28 M, VGG-16 138.36 M, VGG-19 143.67 M), BERT-base 110 M (Devlin et al.), GPT-2 small 124 M
(Radford et al.), and the Atari network of DQN (Mnih et al., Nature 2015: 1.69 M) for DQN and
A2C. Optimizer states: 1 (SGD with momentum, or RMSprop for the RL agents), 2 for the
transformers (Adam). These are assumptions about which variant the testbed ran; the CUDA
context is not separated out, so it is counted in the per-sample part.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SpecError


@dataclass(frozen=True, slots=True)
class ModelProfile:
    name: str
    scaling_app: str  # Pollux application whose fitted scaling is used
    gavel_type: str  # Gavel job type (one GPU) for type speed and co-location
    default_batch: int | None  # per-GPU batch when a trace gives none (None: the median
    # per-GPU batch of the Pollux app's measured points)
    blox: tuple[str, str] | None = None  # (model, batch) in Blox's co-location data
    footprint_mib: float | None = None  # measured memory at footprint_batch (the
    # SJF-BSBF table's MB, read as MiB)
    footprint_batch: int | None = None
    params_m: float | None = None  # parameters, millions
    optimizer_states: int = 1

    @property
    def fixed_mib(self) -> float | None:
        if self.params_m is None or self.footprint_mib is None:
            return None
        return self.params_m * 1e6 * 4 * (2 + self.optimizer_states) / 2**20

    @property
    def checkpoint_mib(self) -> float | None:
        """A checkpoint's size: fp32 weights and optimizer state (gradients are not saved)."""
        if self.params_m is None:
            return None
        return self.params_m * 1e6 * 4 * (1 + self.optimizer_states) / 2**20

    @property
    def per_sample_mib(self) -> float | None:
        fixed, footprint, batch = self.fixed_mib, self.footprint_mib, self.footprint_batch
        if fixed is None or footprint is None or batch is None:
            return None
        return (footprint - fixed) / batch

    def memory_mib(self, local_batch: float) -> float | None:
        """GPU memory at a per-GPU batch, or None where no footprint was measured."""
        fixed, per_sample = self.fixed_mib, self.per_sample_mib
        if fixed is None or per_sample is None:
            return None
        return fixed + per_sample * local_batch


ZOO: dict[str, ModelProfile] = {
    p.name: p
    for p in (
        ModelProfile(
            "resnet18",
            "cifar10",
            "ResNet-18 (batch size 128)",
            128,
            footprint_mib=6432,
            footprint_batch=128,
            params_m=11.69,
        ),
        ModelProfile(
            "shufflenet_v2_x1_0",
            "cifar10",
            "ResNet-18 (batch size 128)",
            128,
            footprint_mib=5252,
            footprint_batch=128,
            params_m=2.28,
        ),
        ModelProfile(
            "vgg16",
            "imagenet",
            "ResNet-50 (batch size 16)",
            16,
            blox=("vgg19", "32"),
            footprint_mib=4224,
            footprint_batch=16,
            params_m=138.36,
        ),
        ModelProfile(
            "vgg19",
            "imagenet",
            "ResNet-50 (batch size 16)",
            16,
            blox=("vgg19", "32"),
            footprint_mib=4304,
            footprint_batch=16,
            params_m=143.67,
        ),
        ModelProfile(
            "dqn", "ncf", "A3C", 128, footprint_mib=2230, footprint_batch=128, params_m=1.69
        ),
        ModelProfile(
            "a2c", "ncf", "A3C", 64, footprint_mib=2094, footprint_batch=64, params_m=1.69
        ),
        ModelProfile(
            "bert",
            "bert",
            "Transformer (batch size 16)",
            4,
            footprint_mib=8058,
            footprint_batch=4,
            params_m=110.0,
            optimizer_states=2,
        ),
        ModelProfile(
            "gpt2",
            "bert",
            "LM (batch size 5)",
            4,
            footprint_mib=10532,
            footprint_batch=4,
            params_m=124.0,
            optimizer_states=2,
        ),
        ModelProfile(
            "cifar10",
            "cifar10",
            "ResNet-18 (batch size 128)",
            128,
            footprint_mib=6432,
            footprint_batch=128,
            params_m=11.69,
        ),
        ModelProfile(
            "imagenet",
            "imagenet",
            "ResNet-50 (batch size 64)",
            None,
            blox=("resnet50", "64"),
            params_m=25.56,
        ),  # torchvision ResNet-50
        # (no footprint measured: memory stays unknown; the parameter count only sizes checkpoints)
        ModelProfile("deepspeech2", "deepspeech2", "LM (batch size 20)", None),
        ModelProfile(
            "yolov3", "yolov3", "ResNet-50 (batch size 16)", None, params_m=61.95
        ),  # YOLOv3-416
        ModelProfile("ncf", "ncf", "Recommendation (batch size 8192)", None),
    )
}

# Muri spells ShuffleNet with its torchvision name; accept the short one too.
ALIASES = {"shufflenet_v2": "shufflenet_v2_x1_0", "shufflenet": "shufflenet_v2_x1_0"}


def profile(model: str) -> ModelProfile:
    name = ALIASES.get(model, model)
    if name not in ZOO:
        raise SpecError("model", f"no performance profile for '{model}' (known: {', '.join(ZOO)})")
    return ZOO[name]
