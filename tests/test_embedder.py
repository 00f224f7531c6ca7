"""The real ONNX embedder: reference vectors, semantics, truncation, model errors."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import semsearch
from semsearch.config import load_settings
from semsearch.errors import ConfigError, ModelError
from semsearch.index import Index
from semsearch.model.builds import Variant, packaged_tokenizer, probed_flags
from semsearch.model.embedder import (
    INT8_MODEL_NAME,
    INT8_MODEL_SHA256,
    VARIANTS,
    HashEmbedder,
    OnnxEmbedder,
    cpu_flags,
    default_variant,
    load_tokenizer,
)
from tests.conftest import write_tree

REFERENCE = json.loads((Path(__file__).parent / "data" / "reference_embeddings.json").read_text())
# Cosine to the fp32 reference vectors: fp32 reproduces them, int8 stays close.
REFERENCE_COSINE = {"fp32": 0.999, "int8": 0.98}
# int8 quantises activations with one scale per call: a short text padded beside long ones moves.
BATCH_COSINE = {"fp32": 0.999, "int8": 0.97}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def embedder(request: pytest.FixtureRequest) -> OnnxEmbedder:
    return OnnxEmbedder(variant=request.param)


def test_matches_recorded_reference_vectors(embedder: OnnxEmbedder) -> None:
    vectors = embedder.embed(REFERENCE["sentences"])
    expected = np.asarray(REFERENCE["vectors"], dtype=np.float32)
    cosines = (vectors * expected).sum(axis=1) / np.linalg.norm(expected, axis=1)
    assert vectors.shape == (3, 384)
    assert embedder.variant is not None
    assert cosines.min() >= REFERENCE_COSINE[embedder.variant]


def test_each_variant_has_its_own_verified_model_id() -> None:
    assert OnnxEmbedder(variant="fp32").model_id == REFERENCE["model_id"]
    # The id int8 indexes have recorded since the first int8 file: the rebuilt file (attention
    # as one node) keeps it, so those indexes are searched without a rebuild.
    assert OnnxEmbedder(variant="int8").model_id == f"{INT8_MODEL_NAME}@2d3757f950bbd648"
    assert not INT8_MODEL_SHA256.startswith("2d3757f950bbd648")


@pytest.mark.parametrize(
    ("vectors_sha256", "expected"),
    [(None, "m@" + "a" * 16), ("b" * 64, "m@" + "b" * 16)],
)
def test_a_variant_id_names_the_file_that_first_made_its_vectors(
    vectors_sha256: str | None, expected: str
) -> None:
    assert Variant("int8", "m", "a" * 64, True, vectors_sha256).model_id == expected


def test_corrupted_int8_model_is_refused(tmp_path: Path) -> None:
    package = tmp_path / "semsearch"
    shutil.copytree(Path(semsearch.__file__).parent, package)
    model = package / "data" / "all-MiniLM-L6-v2" / "model-int8.onnx"
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF
    model.write_bytes(bytes(data))
    script = (
        "from semsearch.model.embedder import OnnxEmbedder\n"
        "from semsearch.errors import ModelError\n"
        "try:\n"
        "    OnnxEmbedder(variant='int8').embed(['hello'])\n"
        "except ModelError as exc:\n"
        "    print(exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}  # cwd too: `-c` puts it first on sys.path
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"{model} has sha256" in out
    assert f"expected {INT8_MODEL_SHA256}" in out
    assert "pip install --force-reinstall semsearch" in out


@pytest.mark.parametrize(
    ("flags", "machine", "expected"),
    [
        ({"avx2", "avx512f", "avx512_vnni", "amx_int8"}, "x86_64", "int8"),
        ({"avx2", "avx_vnni"}, "x86_64", "int8"),
        ({"avx2", "fma"}, "x86_64", "int8"),  # the AVX2 kernels: int8 still wins there
        ({"avx", "sse4_2", "fma"}, "x86_64", "fp32"),
        ({"avx2", "avx512_vnni"}, "AMD64", "int8"),
        ({"asimd", "asimddp"}, "aarch64", "fp32"),
        (set(), "x86_64", "fp32"),
    ],
)
def test_default_variant_follows_the_cpu(flags: set[str], machine: str, expected: str) -> None:
    assert default_variant(frozenset(flags), machine) == expected


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="needs Linux's /proc/cpuinfo")
def test_the_cpu_probe_finds_avx2_where_linux_lists_it() -> None:
    """Windows and macOS have no /proc/cpuinfo: there `auto` learns of AVX2 from numpy's CPUID
    probe, which must agree with Linux's list where both exist."""
    lines = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines()
    listed = any("avx2" in line.split() for line in lines if line.startswith("flags"))
    assert ("avx2" in probed_flags()) == listed
    assert ("avx2" in cpu_flags()) == listed


AVX2_ONLY = Path(__file__).parent.parent / "bench" / "avx2only.c"
# The child embeds the reference sentences with int8 and says what CPUID showed it (numpy's probe).
EMBED_INT8 = """
import json, sys
from semsearch.model.embedder import OnnxEmbedder
from semsearch.model.builds import cpu_features
vectors = OnnxEmbedder(variant="int8").embed(json.loads(sys.argv[1]))
wide = ("AVX2", "AVX512")
seen = sorted(name for name, on in cpu_features().items() if on and name.startswith(wide))
print(json.dumps({"seen": seen, "vectors": vectors.tolist()}))
"""


def _cpuid_faulting() -> bool:
    """Linux on an x86-64 CPU with AVX2 that can make CPUID trap (bench/avx2only.c needs it)."""
    return platform.machine() == "x86_64" and {"avx2", "cpuid_fault"} <= cpu_flags()


@pytest.mark.skipif(
    shutil.which("gcc") is None or not _cpuid_faulting(),
    reason="needs gcc and an x86-64 Linux CPU with AVX2 and CPUID faulting",
)
def test_int8_on_the_kernels_of_an_avx2_only_cpu_stays_close_to_fp32(tmp_path: Path) -> None:
    """What `auto` gives a CPU with AVX2 and no AVX-512 or VNNI: with those hidden from CPUID,
    onnxruntime runs its AVX2 kernels (u8 x s8 pairs summed in 16 bits), and the int8 vectors
    stay within the cosine 0.98 of fp32's reference that the variant is held to, and close to
    the same model on this CPU's own kernels."""
    preload = tmp_path / "avx2only.so"
    subprocess.run(
        ["gcc", "-O2", "-shared", "-fPIC", "-o", str(preload), str(AVX2_ONLY)], check=True
    )
    command = [sys.executable, "-c", EMBED_INT8, json.dumps(REFERENCE["sentences"])]
    masked = subprocess.run(
        command, env={**os.environ, "LD_PRELOAD": str(preload)}, capture_output=True, text=True
    )
    assert masked.returncode == 0, masked.stderr[-2000:]
    answer = json.loads(masked.stdout)
    assert answer["seen"] == ["AVX2"]  # the mask took: AVX-512 and VNNI are gone
    avx2 = np.asarray(answer["vectors"], dtype=np.float32)
    reference = np.asarray(REFERENCE["vectors"], dtype=np.float32)
    native = OnnxEmbedder(variant="int8").embed(REFERENCE["sentences"])

    def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)

    assert avx2.shape == (3, 384)
    assert cosines(avx2, reference).min() >= REFERENCE_COSINE["int8"]
    assert cosines(avx2, native).min() >= 0.99


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_variant_is_forced_by_env_or_config(tmp_path: Path, variant: str) -> None:
    env = {"SS_CONFIG_PATH": str(tmp_path / "config.json"), "SS_INDEX_PATH": str(tmp_path / "i")}
    assert Index(load_settings({**env, "SS_MODEL_VARIANT": variant})).embedder.model_id == (
        VARIANTS[variant].model_id
    )
    (tmp_path / "config.json").write_text(json.dumps({"modelVariant": variant}))
    assert Index(load_settings(env)).embedder.model_id == VARIANTS[variant].model_id
    with pytest.raises(ConfigError, match="Unknown model variant 'int4'"):
        load_settings({**env, "SS_MODEL_VARIANT": "int4"})


def test_new_indexes_get_the_cpu_rule_by_default(tmp_path: Path) -> None:
    env = {"SS_CONFIG_PATH": str(tmp_path / "config.json"), "SS_INDEX_PATH": str(tmp_path / "i")}
    settings = load_settings(env)
    assert settings.model_variant == "auto"
    expected = VARIANTS[default_variant()].model_id  # int8 on an AVX2 CPU, else fp32
    assert Index(settings).embedder.model_id == expected
    assert OnnxEmbedder().model_id == expected


def test_an_index_keeps_the_variant_that_built_it(tmp_path: Path) -> None:
    folder = write_tree(
        tmp_path / "docs",
        {"pay.md": "Failed card payments are retried three times.", "soup.md": "Tomato soup."},
    )
    env = {"SS_CONFIG_PATH": str(tmp_path / "config.json"), "SS_INDEX_PATH": str(tmp_path / "i")}
    old = Index(load_settings({**env, "SS_MODEL_VARIANT": "fp32"}))  # an index from before int8
    old.update([folder])
    expected = old.search("retry a failed payment", mode="vector")
    old.close()

    upgraded = Index(load_settings({**env, "SS_MODEL_VARIANT": "int8"}))
    assert upgraded.search("retry a failed payment", mode="vector") == expected
    (folder / "more.md").write_text("Refunds take five days.", encoding="utf-8")
    upgraded.update([folder])  # incremental: still fp32 vectors
    assert upgraded.status().model == (VARIANTS["fp32"].model_id, 384)
    upgraded.update([folder], force=True)  # the rebuild moves to the configured variant
    assert upgraded.status().model == (VARIANTS["int8"].model_id, 384)
    assert upgraded.search("retry a failed payment", mode="vector")[0].path.endswith("pay.md")
    upgraded.close()


def test_vectors_are_unit_length(embedder: OnnxEmbedder) -> None:
    norms = np.linalg.norm(embedder.embed(["one", "two words", "x" * 50]), axis=1)
    assert np.allclose(norms, 1.0, atol=1e-5)


@pytest.mark.parametrize(
    ("anchor", "paraphrase", "unrelated"),
    [
        ("How do I reset my password?", "I forgot my login password", "The cat sat on the mat."),
        ("retry a failed payment", "charge the card again after an error", "tomato soup recipe"),
        ("the weather is cold today", "it is freezing outside", "compile the kernel module"),
    ],
)
def test_paraphrases_score_higher_than_unrelated(
    embedder: OnnxEmbedder, anchor: str, paraphrase: str, unrelated: str
) -> None:
    a, p, u = embedder.embed([anchor, paraphrase, unrelated])
    assert float(a @ p) > float(a @ u) + 0.2


def test_batching_does_not_change_vectors(embedder: OnnxEmbedder) -> None:
    texts = ["short", "a somewhat longer sentence about databases " * 3, "mid length text here"]
    together = embedder.embed(texts)
    alone = np.vstack([embedder.embed([t]) for t in texts])
    assert embedder.variant is not None
    assert ((together * alone).sum(axis=1) >= BATCH_COSINE[embedder.variant]).all()


def test_long_text_is_truncated_to_the_window(embedder: OnnxEmbedder) -> None:
    long_text = "word " * 2000
    head = " ".join(["word"] * 254)
    a, b = embedder.embed([long_text, head])
    assert float(a @ b) >= 0.999


def test_token_spans_have_no_special_tokens(embedder: OnnxEmbedder) -> None:
    text = "Hello, wörld 中文"
    spans = embedder.token_spans(text)
    assert [text[s:e] for s, e in spans] == ["Hello", ",", "wörld", "中", "文"]


def test_model_dir_without_model_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="No ONNX model in"):
        OnnxEmbedder(tmp_path)
    with pytest.raises(ModelError, match="does not exist"):
        OnnxEmbedder(tmp_path / "missing")


def test_corrupt_model_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"not an onnx model")
    shutil.copy(packaged_tokenizer(), tmp_path / "tokenizer.json")
    broken = OnnxEmbedder(tmp_path)
    assert broken.model_id.startswith(f"{tmp_path.name}@")
    with pytest.raises(ModelError, match="Cannot load model"):
        broken.embed(["hello"])


BPE_TOKENIZER = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": [],
    "normalizer": None,
    "pre_tokenizer": {"type": "Whitespace"},
    "post_processor": None,
    "decoder": None,
    "model": {
        "type": "BPE",
        "dropout": None,
        "unk_token": "u",
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": False,
        "byte_fallback": False,
        "vocab": {"u": 0, "a": 1, "b": 2, "ab": 3},
        "merges": ["a b"],
    },
}


def test_a_model_folder_may_bring_another_kind_of_tokenizer(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"never run here")
    (tmp_path / "tokenizer.json").write_text(json.dumps(BPE_TOKENIZER))
    assert load_tokenizer(tmp_path / "tokenizer.json").encode("ab ba").ids == [3, 2, 1]
    assert OnnxEmbedder(tmp_path).token_spans("ab ba") == [(0, 2), (3, 4), (4, 5)]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "key must be a string"),
        (b"\xff\xfe\x00binary", "valid UTF-8"),
        (None, "No such file"),
    ],
)
def test_a_bad_tokenizer_file_is_a_clear_error(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    path = tmp_path / "tokenizer.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ModelError, match=f"Cannot load tokenizer {path}: .*{message}"):
        load_tokenizer(path)


def test_the_tokenizer_neither_truncates_nor_pads() -> None:
    """The packaged file truncates and pads to 128 tokens; chunking needs every token, and the
    embedder clips to the model window itself."""
    settings = json.loads(packaged_tokenizer().read_text(encoding="utf-8"))
    assert settings["truncation"]["max_length"] == settings["padding"]["strategy"]["Fixed"] == 128
    tokenizer = load_tokenizer(packaged_tokenizer())
    assert len(tokenizer.encode("word " * 600).ids) == 602
    assert [len(e.ids) for e in tokenizer.encode_batch(["a", "a b c"])] == [3, 5]


def test_special_tokens_wrap_the_text() -> None:
    tokenizer = load_tokenizer(packaged_tokenizer())
    plain = tokenizer.encode("hello world", add_special_tokens=False)
    wrapped = tokenizer.encode("hello world")
    assert wrapped.ids == [101, *plain.ids, 102]  # [CLS] ... [SEP]
    assert wrapped.offsets == [(0, 0), *plain.offsets, (0, 0)]


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("café cafe\u0301 naïve", ["café", "cafe", "naïve"]),  # accents stripped
        ("nul\x00here", ["nu", "l", "her", "e"]),  # a control character removed
        ("İstanbul Straße", ["İstanbul", "St", "raße"]),  # İ lowercases to two characters
        ("😀 emoji🙂inside", ["😀", "emoji🙂inside"]),  # unknown words, astral characters
        ("a [SEP] b[CLS]c", ["a", "[SEP]", "b", "[CLS]", "c"]),  # special tokens in the text
        ("x" * 120, ["x" * 120]),  # a word over 100 characters is one unknown token
    ],
)
def test_token_spans_are_slices_of_the_original_text(text: str, pieces: list[str]) -> None:
    spans = OnnxEmbedder(variant="fp32").token_spans(text)
    assert [text[start:end] for start, end in spans] == pieces


def test_token_spans_of_many_texts_are_each_text_s_own(embedder: OnnxEmbedder) -> None:
    """The first pass tokenises many files in one call: the same spans as one at a time."""
    texts = [
        "Hello, wörld 中文",
        "",
        "def parse_header(line):\n    return line.split(':')\n" * 40,
        "café cafe\u0301 naïve 😀 a [SEP] b",
    ]
    expected = [embedder.token_spans(text) for text in texts]
    assert embedder.token_spans_many(texts) == expected
    assert embedder.token_spans_many(texts[2:3]) == expected[2:3]
    assert embedder.token_spans_many([]) == []
    assert HashEmbedder().token_spans_many(texts) == [HashEmbedder().token_spans(t) for t in texts]


def test_hash_embedder_is_deterministic() -> None:
    first, second = HashEmbedder().embed(["same words"]), HashEmbedder().embed(["same words"])
    assert np.array_equal(first, second)
    assert HashEmbedder().model_id != OnnxEmbedder().model_id


def test_query_embedding_matches_batch_embedding(embedder: OnnxEmbedder) -> None:
    query = "where are failed payments retried"
    single = embedder.embed_query(query)
    batched = embedder.embed([query, "another text in the same batch"])[0]
    assert single.shape == (384,)
    assert embedder.variant is not None
    assert float(single @ batched) >= BATCH_COSINE[embedder.variant]


def test_one_shot_session_gives_the_same_vectors(embedder: OnnxEmbedder) -> None:
    one_shot = OnnxEmbedder(one_shot=True, variant=embedder.variant)
    for text in ("retry with exponential backoff", "def parse_header(line):", "café"):
        fast, optimised = one_shot.embed_query(text), embedder.embed_query(text)
        assert float(fast @ optimised) > 0.9999, text
    assert one_shot.model_id == embedder.model_id
