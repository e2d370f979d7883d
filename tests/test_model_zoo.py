"""The model zoo's gradient sizes: every parameter count has a source, and the Pollux/AdaptDL
benchmark models' counts follow from their architectures (docs/MODEL.md §4)."""

from __future__ import annotations

import pytest

from crop_gym.model.jobs import MODEL_ZOO, PARAMETER_SOURCES


def test_every_model_names_the_source_of_its_parameter_count() -> None:
    assert set(PARAMETER_SOURCES) == set(MODEL_ZOO)
    assert all(PARAMETER_SOURCES[m] for m in MODEL_ZOO)


def test_pollux_benchmark_sizes_from_their_architectures() -> None:
    # NeuMF-end (AdaptDL benchmark/models/ncf): GMF and MLP embeddings of 6,040 users and 3,706
    # items (factors 32 and 32 * 2^2), an MLP 256 -> 128 -> 64 -> 32 and a 64 -> 1 head.
    users, items, f = 6040, 3706, 32
    mlp = sum(a * (a // 2) + a // 2 for a in (256, 128, 64))
    ncf = (users + items) * (f + 4 * f) + mlp + (2 * f + 1)
    assert MODEL_ZOO["ncf"].params == ncf == 1_602_657
    assert MODEL_ZOO["ncf"].grad_bytes == pytest.approx(6.41e6, rel=1e-3)

    # YOLOv3 for VOC (AdaptDL benchmark/models/yolov3): Darknet-53 + the FPN, 3 x (20 + 5) outputs.
    def conv(i: int, o: int, k: int, bn: bool = True) -> int:
        return i * o * k * k + (2 * o if bn else o)

    darknet = conv(3, 32, 3) + sum(
        conv(i, o, 3) + n * (conv(o, o // 2, 1) + conv(o // 2, o, 3))
        for i, o, n in ((32, 64, 1), (64, 128, 2), (128, 256, 8), (256, 512, 8), (512, 1024, 4))
    )

    def block(i: int, c: int) -> int:
        return (
            conv(i, c, 1)
            + conv(c, 2 * c, 3)
            + conv(2 * c, c, 1)
            + conv(c, 2 * c, 3)
            + conv(2 * c, c, 1)
        )

    out = 3 * (20 + 5)
    fpn = (
        block(1024, 512)
        + conv(512, 1024, 3)
        + conv(1024, out, 1, False)
        + conv(512, 256, 1)
        + block(768, 256)
        + conv(256, 512, 3)
        + conv(512, out, 1, False)
        + conv(256, 128, 1)
        + block(384, 128)
        + conv(128, 256, 3)
        + conv(256, out, 1, False)
    )
    assert darknet == 40_584_928
    assert MODEL_ZOO["yolov3"].params == darknet + fpn == 61_626_049
