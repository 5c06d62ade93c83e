"""Which commits between two builds touch the blamed transformer or kernel: real git on a repository laid out
like onnxruntime's tree, with dated commits, an annotated and a lightweight release tag, a rename and a clone."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.blame import commits
from harness.blame.commits import Resolved, Suspect
from harness.errors import HarnessError, UsageError

CPU = "CPUExecutionProvider"
OPT = "onnxruntime/core/optimizer"
CPU_MATH = "onnxruntime/core/providers/cpu/math"
CONTRIB = "onnxruntime/contrib_ops/cpu"

FUSION_H = """#pragma once
#include "core/optimizer/graph_transformer.h"
namespace onnxruntime {
class SimplifiedLayerNormFusion : public GraphTransformer {
 public:
  SimplifiedLayerNormFusion(const InlinedHashSet<std::string_view>& compatible_eps = {}) noexcept
      : GraphTransformer("SimplifiedLayerNormFusion", compatible_eps) {}
  Status ApplyImpl(Graph& graph, bool& modified, int level, const logging::Logger& logger) const override;
};
}  // namespace onnxruntime
"""
FUSION_CC = """#include "core/optimizer/simplified_layer_norm_fusion.h"
namespace onnxruntime {
Status SimplifiedLayerNormFusion::ApplyImpl(Graph& graph, bool& modified, int, const logging::Logger&) const {
  return Status::OK();
}
}  // namespace onnxruntime
"""
LAYER_NORM_FUSION_H = """#pragma once
class LayerNormFusion : public GraphTransformer {
 public:
  LayerNormFusion() noexcept : GraphTransformer("LayerNormFusion", {}) {}
};
"""
GEMM_H = """#pragma once
class GemmTransposeFusion : public RewriteRule {
 public:
  GemmTransposeFusion() noexcept : RewriteRule("GemmTransposeFusion") {}
};
"""
GEMM_CC = """#include "core/optimizer/gemm_transpose_fusion.h"
bool GemmTransposeFusion::SatisfyCondition(const Graph&, const Node&, const logging::Logger&) const { return true; }
"""
UTILS_CC = """#include "core/optimizer/simplified_layer_norm_fusion.h"
#include "core/optimizer/gemm_transpose_fusion.h"
// Transformers are instantiated here, by class, never by their name.
InlinedVector<std::unique_ptr<GraphTransformer>> GenerateTransformers(TransformerLevel level) {
  transformers.emplace_back(std::make_unique<SimplifiedLayerNormFusion>(cpu_eps));
  rule_transformer->Register(std::make_unique<GemmTransposeFusion>());
}
"""
ELEMENTWISE_CC = """#include "core/providers/cpu/math/element_wise_ops.h"
namespace onnxruntime {
#define REG_ELEMENTWISE_TYPED_KERNEL(OP_TYPE, VERSION, TYPE, KERNEL_CLASS)         \\
  ONNX_CPU_OPERATOR_TYPED_KERNEL(                                                 \\
      OP_TYPE, VERSION, TYPE,                                                     \\
      KernelDefBuilder().TypeConstraint("T", DataTypeImpl::GetTensorType<TYPE>()), \\
      KERNEL_CLASS<TYPE>);

REG_ELEMENTWISE_TYPED_KERNEL(Add, 14, float, Add);
REG_ELEMENTWISE_TYPED_KERNEL(Sub, 14, float, Sub);
}  // namespace onnxruntime
"""
ELEMENTWISE_H = "#pragma once\ntemplate <typename T> class Add final : public OpKernel {};\n"
PROVIDER_CC = """// The registration list: the provider first, the op last. Add is registered here by class name only.
class ONNX_OPERATOR_VERSIONED_TYPED_KERNEL_CLASS_NAME(kCpuExecutionProvider, kOnnxDomain, 7, 12, float, Add);
class ONNX_OPERATOR_TYPED_KERNEL_CLASS_NAME(kCpuExecutionProvider, kOnnxDomain, 14, float, Add);
Status RegisterOnnxOperatorKernels(KernelRegistry& kernel_registry) {
  static const BuildKernelCreateInfoFn function_table[] = {
      BuildKernelCreateInfo<ONNX_OPERATOR_TYPED_KERNEL_CLASS_NAME(kCpuExecutionProvider, kOnnxDomain, 14, float,
                                                                  Add)>,
  };
}
"""
GEMM_KERNEL_CC = """// Add the bias after the product. An old registration, kept commented out:
// ONNX_CPU_OPERATOR_KERNEL(Add, 7, KernelDefBuilder(), Add<float>);
/* ONNX_CPU_OPERATOR_KERNEL(Add, 6, KernelDefBuilder(), Add<float>); */
ONNX_CPU_OPERATOR_KERNEL(Gemm, 13, KernelDefBuilder(), Gemm<float>);
"""
SKIP_CC = """#include "contrib_ops/cpu/skip_layer_norm.h"
namespace onnxruntime {
namespace contrib {
#define REGISTER_KERNEL_TYPED(T)                                  \\
  ONNX_OPERATOR_TYPED_KERNEL_EX(                                  \\
      SkipLayerNormalization,                                     \\
      kMSDomain,                                                  \\
      1,                                                          \\
      T,                                                          \\
      kCpuExecutionProvider,                                      \\
      KernelDefBuilder()                                          \\
          .TypeConstraint("T", DataTypeImpl::GetTensorType<T>()), \\
      SkipLayerNorm<T, false>);                                   \\
  ONNX_OPERATOR_TYPED_KERNEL_EX(                                  \\
      SkipSimplifiedLayerNormalization,                           \\
      kMSDomain,                                                  \\
      1,                                                          \\
      T,                                                          \\
      kCpuExecutionProvider,                                      \\
      KernelDefBuilder()                                          \\
          .TypeConstraint("T", DataTypeImpl::GetTensorType<T>()), \\
      SkipLayerNorm<T, true>);

REGISTER_KERNEL_TYPED(float)
REGISTER_KERNEL_TYPED(double)
}  // namespace contrib
}  // namespace onnxruntime
"""
LAYER_NORM_CC = """#include "core/providers/cpu/nn/layer_norm_impl.h"
namespace onnxruntime {
namespace contrib {
ONNX_OPERATOR_TYPED_KERNEL_EX(
    SimplifiedLayerNormalization, kOnnxDomain, 1, float, kCpuExecutionProvider,
    KernelDefBuilder().TypeConstraint("T", DataTypeImpl::GetTensorType<float>()),
    LayerNorm<true>);
}  // namespace contrib
}  // namespace onnxruntime
"""
CUDA_BINARY_CC = """#include "core/providers/cuda/math/binary_elementwise_ops.h"
#define BINARY_OP_TYPED(name, ver, T)                                                  \\
  ONNX_OPERATOR_TYPED_KERNEL_EX(                                                      \\
      name, kOnnxDomain, ver, T, kCudaExecutionProvider,                              \\
      (*KernelDefBuilder::Create()).TypeConstraint("T", DataTypeImpl::GetTensorType<T>()), \\
      name<T>);

#define BINARY_OP_REGISTER_HFD(name, ver) \\
  BINARY_OP_TYPED(name, ver, MLFloat16)   \\
  BINARY_OP_TYPED(name, ver, float)       \\
  BINARY_OP_TYPED(name, ver, double)

BINARY_OP_REGISTER_HFD(Add, 14)
BINARY_OP_REGISTER_HFD(Mul, 14)
"""
TEST_CC = 'TEST(GraphTransformationTests, Fusion) { ASSERT_EQ(op_to_count["SimplifiedLayerNormFusion"], 1); }\n'


@dataclass
class Fixture:
    repo: Path
    sha: dict[str, str]  # short name of a commit -> its sha


def _env(date: str | None = None, author_date: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    # The fixture's repository is the same wherever it is made: no user's or system's configuration
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_AUTHOR_NAME="Dev", GIT_AUTHOR_EMAIL="dev@example.com",
               GIT_COMMITTER_NAME="Dev", GIT_COMMITTER_EMAIL="dev@example.com")
    if date:
        env.update(GIT_AUTHOR_DATE=author_date or date, GIT_COMMITTER_DATE=date)
    return env


def sh(repo: Path, *args: str, date: str | None = None, author_date: str | None = None) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=_env(date, author_date)).stdout.strip()


def commit(repo: Path, subject: str, date: str, files: dict[str, str], *, author_date: str | None = None,
           move: tuple[str, str] | None = None) -> str:
    if move:
        sh(repo, "mv", *move)
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
        sh(repo, "add", path)
    sh(repo, "commit", "-q", "-m", subject, date=f"{date}T12:00:00+0000",
       author_date=f"{author_date}T09:00:00+0000" if author_date else None)
    return sh(repo, "rev-parse", "HEAD")


def lay_out(repo: Path) -> Fixture:
    repo.mkdir()
    sh(repo, "init", "-q", "-b", "main")
    sha = {}
    sha["initial"] = commit(repo, "Initial tree", "2025-01-10", {
        "README.md": "# onnxruntime\n", "VERSION_NUMBER": "1.23.2\n",
        f"{OPT}/simplified_layer_norm_fusion.h": FUSION_H, f"{OPT}/simplified_layer_norm_fusion.cc": FUSION_CC,
        f"{OPT}/layer_norm_fusion.h": LAYER_NORM_FUSION_H,
        f"{OPT}/gemm_transpose_fusion.h": GEMM_H, f"{OPT}/gemm_transpose_fusion.cc": GEMM_CC,
        f"{OPT}/graph_transformer_utils.cc": UTILS_CC,
        f"{CPU_MATH}/element_wise_ops.cc": ELEMENTWISE_CC, f"{CPU_MATH}/element_wise_ops.h": ELEMENTWISE_H,
        f"{CPU_MATH}/gemm.cc": GEMM_KERNEL_CC,
        "onnxruntime/core/providers/cpu/cpu_execution_provider.cc": PROVIDER_CC,
        f"{CONTRIB}/skip_layer_norm.cc": SKIP_CC, f"{CONTRIB}/layer_norm.cc": LAYER_NORM_CC,
        "onnxruntime/core/providers/cuda/math/binary_elementwise_ops.cc": CUDA_BINARY_CC,
        "onnxruntime/core/providers/cuda/math/binary_elementwise_ops_impl.cu": "// the CUDA kernels of Add, Mul\n",
        "onnxruntime/core/mlas/lib/sgemm.cpp": "// MLAS sgemm: Add the partial sums\n",
        "onnxruntime/test/optimizer/graph_transform_test.cc": TEST_CC,
    })
    sha["pre"] = commit(repo, "Speed up SimplifiedLayerNormFusion matching (#20001)", "2025-02-01",
                        {f"{OPT}/simplified_layer_norm_fusion.cc": FUSION_CC + "// faster\n"})
    sh(repo, "tag", "-a", "v1.23.2", "-m", "v1.23.2", date="2025-02-02T12:00:00+0000")
    sha["readme"] = commit(repo, "Update README", "2025-03-01", {"README.md": "# onnxruntime\n\nMore.\n"})
    sha["mlas"] = commit(repo, "MLAS: faster sgemm on AVX2 (#20010)", "2025-03-05",
                         {"onnxruntime/core/mlas/lib/sgemm.cpp": "// MLAS sgemm, AVX2\n"})
    sha["fusion"] = commit(repo, "Fuse Cast into SimplifiedLayerNormFusion (#20020)", "2025-03-10",
                           {f"{OPT}/simplified_layer_norm_fusion.cc": FUSION_CC + "// faster\n// Cast\n"})
    sha["add"] = commit(repo, "Add an MLFloat16 Add kernel on CPU (#20030)", "2025-03-15", {
        f"{CPU_MATH}/element_wise_ops.cc": ELEMENTWISE_CC.replace(
            "REG_ELEMENTWISE_TYPED_KERNEL(Sub,", "REG_ELEMENTWISE_TYPED_KERNEL(Add, 14, MLFloat16, Add);\n"
                                                "REG_ELEMENTWISE_TYPED_KERNEL(Sub,"),
        "onnxruntime/core/providers/cpu/cpu_execution_provider.cc":
            PROVIDER_CC + "class ONNX_OPERATOR_TYPED_KERNEL_CLASS_NAME(kCpuExecutionProvider, kOnnxDomain, 14, "
                          "MLFloat16, Add);\n"})
    sha["gemm"] = commit(repo, "GemmTransposeFusion: keep alpha (#20035)", "2025-03-16",
                         {f"{OPT}/gemm_transpose_fusion.cc": GEMM_CC + "// alpha\n"})
    # a cherry-pick: authored long before it entered the branch; its date is the branch's
    sha["both"] = commit(repo, "Share the broadcasting helpers", "2025-03-20", author_date="2025-01-02", files={
        f"{OPT}/simplified_layer_norm_fusion.h": FUSION_H + "// helpers\n",
        f"{CPU_MATH}/element_wise_ops.h": ELEMENTWISE_H + "// helpers\n"})
    sha["utils"] = commit(repo, "Enable SimplifiedLayerNormFusion at level 2 (#20040)", "2025-03-25",
                          {f"{OPT}/graph_transformer_utils.cc": UTILS_CC + "// level 2\n",
                           "onnxruntime/test/optimizer/graph_transform_test.cc": TEST_CC + "// level 2\n"})
    sha["skip"] = commit(repo, "Handle an empty input in SkipLayerNorm (#20045)", "2025-03-26",
                         {f"{CONTRIB}/skip_layer_norm.cc": SKIP_CC + "// empty input\n"})
    sha["move"] = commit(repo, "Move the skip layer norm kernels to skip_norm.cc (#20050)", "2025-03-28", {},
                         move=(f"{CONTRIB}/skip_layer_norm.cc", f"{CONTRIB}/skip_norm.cc"))
    sha["bump"] = commit(repo, "Bump the version to 1.24.1", "2025-04-01", {"VERSION_NUMBER": "1.24.1\n"})
    sh(repo, "tag", "v1.24.1")  # lightweight
    sha["after"] = commit(repo, "Fix SimplifiedLayerNormFusion again (#20060)", "2025-04-05",
                          {f"{OPT}/simplified_layer_norm_fusion.cc": FUSION_CC + "// again\n"})
    return Fixture(repo, sha)


@pytest.fixture(scope="module")
def ort(tmp_path_factory) -> Fixture:
    return lay_out(tmp_path_factory.mktemp("ort") / "onnxruntime")


IN_RANGE = ("readme", "mlas", "fusion", "add", "gemm", "both", "utils", "skip", "move", "bump")


# --- resolve -----------------------------------------------------------------------------------


def test_resolve_prefers_the_build_commit_and_falls_back_to_the_tag_saying_which(ort):
    s = ort.sha
    assert commits.resolve(ort.repo, s["pre"][:10], "1.23.2") == Resolved(s["pre"], "build commit")
    # the build commit wins over the tag even where they differ (a build made after its tag)
    assert commits.resolve(ort.repo, s["after"][:7], "1.24.1") == Resolved(s["after"], "build commit")
    # annotated and lightweight tags both give the commit, not the tag object
    assert commits.resolve(ort.repo, None, "1.23.2") == Resolved(s["pre"], "tag v1.23.2")
    assert commits.resolve(ort.repo, "deadbeefde", "1.24.1") == Resolved(s["bump"], "tag v1.24.1")


def test_resolve_refuses_what_it_cannot_find(ort, tmp_path):
    with pytest.raises(UsageError, match=r"neither the build commit deadbeefde nor the tag v9\.9\.9"):
        commits.resolve(ort.repo, "deadbeefde", "9.9.9")
    with pytest.raises(UsageError, match=r"no build commit .* nor the tag v9\.9\.9"):
        commits.resolve(ort.repo, None, "9.9.9")
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(UsageError, match="not a git repository"):
        commits.resolve(plain, None, "1.24.1")
    with pytest.raises(UsageError, match="not a git repository"):  # a folder inside a clone is not the clone
        commits.resolve(ort.repo / "onnxruntime", None, "1.24.1")
    with pytest.raises(UsageError, match="not a git repository"):
        commits.resolve(tmp_path / "absent", None, "1.24.1")
    with pytest.raises(UsageError, match="not a commit id"):
        commits.resolve(ort.repo, "--output=x", "1.24.1")
    with pytest.raises(UsageError, match="not a release version"):
        commits.resolve(ort.repo, None, "1.24.1^{tree}")


# --- where a transformer or kernel lives -----------------------------------------------------------


def test_a_transformer_is_found_by_the_name_it_registers_with_and_brings_its_body(ort):
    bad = ort.sha["bump"]
    assert commits.transformer_sources(ort.repo, bad, "SimplifiedLayerNormFusion") == [
        f"{OPT}/simplified_layer_norm_fusion.cc", f"{OPT}/simplified_layer_norm_fusion.h"]
    assert commits.transformer_sources(ort.repo, bad, "GemmTransposeFusion") == [
        f"{OPT}/gemm_transpose_fusion.cc", f"{OPT}/gemm_transpose_fusion.h"]
    # the literal is the whole name: "LayerNormFusion" is not found in "SimplifiedLayerNormFusion"
    assert commits.transformer_sources(ort.repo, bad, "LayerNormFusion") == [f"{OPT}/layer_norm_fusion.h"]
    assert commits.transformer_sources(ort.repo, bad, "NoSuchFusion") == []
    assert commits.transformer_sources(ort.repo, bad, "simplifiedlayernormfusion") == []


def test_a_kernel_is_found_where_a_kernel_macro_takes_the_op_first(ort):
    bad = ort.sha["bump"]
    ks = commits.kernel_sources
    assert ks(ort.repo, bad, "Add", "", CPU) == [f"{CPU_MATH}/element_wise_ops.cc", f"{CPU_MATH}/element_wise_ops.h"]
    assert ks(ort.repo, bad, "Add", "ai.onnx", CPU) == ks(ort.repo, bad, "Add", "", CPU)
    assert ks(ort.repo, bad, "Add", "com.microsoft", CPU) == []  # ONNX_CPU_OPERATOR_... registers in ai.onnx
    assert ks(ort.repo, bad, "Gemm", "", CPU) == [f"{CPU_MATH}/gemm.cc"]
    assert ks(ort.repo, bad, "SkipSimplifiedLayerNormalization", "com.microsoft", CPU) == [f"{CONTRIB}/skip_norm.cc"]
    assert ks(ort.repo, bad, "SkipSimplifiedLayerNormalization", "", CPU) == []  # kMSDomain, stated
    assert ks(ort.repo, bad, "SimplifiedLayerNormalization", "", CPU) == [f"{CONTRIB}/layer_norm.cc"]
    assert ks(ort.repo, bad, "Add", "", "CUDAExecutionProvider") == [
        "onnxruntime/core/providers/cuda/math/binary_elementwise_ops.cc",
        "onnxruntime/core/providers/cuda/math/binary_elementwise_ops_impl.cu"]
    assert ks(ort.repo, bad, "Sub", "", "CUDAExecutionProvider") == []
    assert ks(ort.repo, bad, "Add", "", "DmlExecutionProvider") == []
    # in L's tree the skip kernels still live under their old name
    assert ks(ort.repo, ort.sha["pre"], "SkipLayerNormalization", "com.microsoft", CPU) == [
        f"{CONTRIB}/skip_layer_norm.cc"]


def test_registration_lists_comments_and_define_parameters_are_not_kernel_sources():
    reg = commits.registers_kernel
    assert not reg(PROVIDER_CC, "Add", "")
    assert not reg(GEMM_KERNEL_CC, "Add", "")
    assert not reg(ELEMENTWISE_CC, "OP_TYPE", "")
    assert reg(ELEMENTWISE_CC, "Sub", "") and not reg(ELEMENTWISE_CC, "Mul", "")
    assert reg(SKIP_CC, "SkipLayerNormalization", "com.microsoft")
    assert reg(CUDA_BINARY_CC, "Mul", "") and not reg(CUDA_BINARY_CC, "Mul", "ai.onnx.ml")
    assert reg('// "//" in a literal is no comment\nconst char* s = "//";\nONNX_CPU_OPERATOR_KERNEL(Relu, 14, B, R);',
               "Relu", "")


# --- the commits -------------------------------------------------------------------------------


def test_suspects_are_the_range_commits_touching_the_located_files_newest_first(ort):
    s = ort.sha
    found = commits.suspects(ort.repo, s["pre"][:10], None, ["SimplifiedLayerNormFusion", "NoSuchFusion"],
                             [("Add", "", CPU)], good_version="1.23.2", bad_version="1.24.1")
    assert (found.good, found.good_from, found.bad, found.bad_from) == (s["pre"], "build commit",
                                                                       s["bump"], "tag v1.24.1")
    assert found.total == len(IN_RANGE) == 10
    assert found.sources == {
        "transformer SimplifiedLayerNormFusion": [f"{OPT}/simplified_layer_norm_fusion.cc",
                                                  f"{OPT}/simplified_layer_norm_fusion.h"],
        "kernel Add (ai.onnx) on CPUExecutionProvider": [f"{CPU_MATH}/element_wise_ops.cc",
                                                         f"{CPU_MATH}/element_wise_ops.h"]}
    assert list(found.unlocated) == ["transformer NoSuchFusion"] and "NoSuchFusion" in found.unlocated[
        "transformer NoSuchFusion"]
    assert found.suspects == [
        Suspect(s["both"], "2025-03-20", "Share the broadcasting helpers", None,
                (f"{OPT}/simplified_layer_norm_fusion.h", f"{CPU_MATH}/element_wise_ops.h")),
        Suspect(s["add"], "2025-03-15", "Add an MLFloat16 Add kernel on CPU (#20030)", 20030,
                (f"{CPU_MATH}/element_wise_ops.cc",)),
        Suspect(s["fusion"], "2025-03-10", "Fuse Cast into SimplifiedLayerNormFusion (#20020)", 20020,
                (f"{OPT}/simplified_layer_norm_fusion.cc",)),
    ]
    listed = {x.sha for x in found.suspects}
    # before L, after B, unrelated, and where the transformer is only instantiated or tested: not suspects
    assert not listed & {s[k] for k in ("pre", "after", "readme", "mlas", "gemm", "utils", "skip", "move", "bump")}
    doc = found.document()
    assert (doc["total"], doc["left"]) == (10, 3)
    assert doc["suspects"][1] == {"sha": s["add"], "date": "2025-03-15", "pr": 20030,
                                  "subject": "Add an MLFloat16 Add kernel on CPU (#20030)",
                                  "paths": [f"{CPU_MATH}/element_wise_ops.cc"]}
    import json
    assert json.loads(json.dumps(doc)) == doc


def test_a_file_moved_in_the_range_is_followed_back_to_its_old_name(ort):
    s = ort.sha
    found = commits.suspects(ort.repo, None, None, (), [("SkipSimplifiedLayerNormalization", "com.microsoft", CPU)],
                             good_version="1.23.2", bad_version="1.24.1")
    assert found.sources == {"kernel SkipSimplifiedLayerNormalization (com.microsoft) on CPUExecutionProvider":
                             [f"{CONTRIB}/skip_norm.cc"]}
    assert [(x.sha, x.pr, x.paths) for x in found.suspects] == [
        (s["move"], 20050, (f"{CONTRIB}/skip_norm.cc",)), (s["skip"], 20045, (f"{CONTRIB}/skip_norm.cc",))]


def test_a_provider_without_kernel_directories_and_an_empty_range_are_said(ort):
    s = ort.sha
    found = commits.suspects(ort.repo, s["bump"], s["bump"], ["GemmTransposeFusion"],
                             [("Add", "", "DmlExecutionProvider")], good_version="1.24.1", bad_version="1.24.1")
    assert found.total == 0 and found.suspects == []
    assert found.unlocated == {"kernel Add (ai.onnx) on DmlExecutionProvider":
                               "no kernel directories known for DmlExecutionProvider"}
    assert list(found.sources) == ["transformer GemmTransposeFusion"]


HOSTILE = ["$(touch pwned)", '"; rm -rf /', "Add.*", "Simplified.*", "`touch pwned`", "--open-files-in-pager=touch x",
           "-Otouch x", "Add|Sub", "*", "\\\"SimplifiedLayerNormFusion\\\""]


def test_hostile_names_locate_nothing_and_run_nothing(ort, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = sh(ort.repo, "status", "--porcelain", "--ignored")
    found = commits.suspects(ort.repo, None, None, HOSTILE, [(n, "", CPU) for n in HOSTILE],
                             good_version="1.23.2", bad_version="1.24.1")
    assert found.sources == {} and found.suspects == []
    assert len(found.unlocated) == 2 * len(HOSTILE)
    assert found.total == 10
    assert list(tmp_path.iterdir()) == [] and sh(ort.repo, "status", "--porcelain", "--ignored") == before
    assert not (ort.repo / "pwned").exists() and not Path("x").exists()
    with pytest.raises(UsageError, match="no commit"):
        commits.transformer_sources(ort.repo, "--output=pwned", "SimplifiedLayerNormFusion")
    assert not Path("pwned").exists()


# --- a clone -----------------------------------------------------------------------------------


def _local_blobs(repo: Path) -> int:
    out = sh(repo, "cat-file", "--batch-check=%(objecttype)", "--batch-all-objects")
    return out.split().count("blob")


def test_a_blobless_clone_gives_the_same_answer_and_fetches_blobs_in_batches(ort, tmp_path):
    sh(ort.repo, "config", "uploadpack.allowFilter", "true")
    try:
        said: list[str] = []
        dest = commits.clone(f"file://{ort.repo}", tmp_path / "clone", log=said.append)
    finally:
        sh(ort.repo, "config", "--unset", "uploadpack.allowFilter")
    assert dest == tmp_path / "clone" and "blobless" in said[-1]
    assert _local_blobs(dest) == 0 and not (dest / "README.md").exists()
    ask = dict(transformers=["SimplifiedLayerNormFusion", "NoSuchFusion"], kernels=[("Add", "", CPU)],
               good_version="1.23.2", bad_version="1.24.1")
    here = commits.suspects(dest, None, None, **ask).document()
    assert here == commits.suspects(ort.repo, None, None, **ask).document()
    assert [x["pr"] for x in here["suspects"]] == [None, 20030, 20020]
    packs = list((dest / ".git" / "objects" / "pack").glob("*.promisor"))
    # one fetch per directory searched, not one per file read
    assert _local_blobs(dest) >= 10 and len(packs) <= 4, (len(packs), _local_blobs(dest))

    said.clear()
    assert commits.clone(f"file://{ort.repo}", dest, log=said.append) == dest
    assert said == [f"{dest}: an existing clone, fetched"]
    moved = ort.repo.with_name("moved-away")
    ort.repo.rename(moved)
    try:
        said.clear()
        assert commits.clone(f"file://{ort.repo}", dest, log=said.append) == dest
        assert "not fetched" in said[0] and "used as it is" in said[0]
    finally:
        moved.rename(ort.repo)


def test_a_server_that_does_not_filter_gives_a_full_clone_and_says_so(ort, tmp_path):
    said: list[str] = []
    dest = commits.clone(f"file://{ort.repo}", tmp_path / "full", log=said.append)
    assert "full clone" in said[-1] and _local_blobs(dest) > 0
    found = commits.suspects(dest, None, None, ["SimplifiedLayerNormFusion"], good_version="1.23.2",
                             bad_version="1.24.1")
    assert [x.sha for x in found.suspects] == [ort.sha["both"], ort.sha["fusion"]]


def test_a_clone_that_fails_says_why_in_one_line(tmp_path):
    with pytest.raises(HarnessError) as e:
        commits.clone(f"file://{tmp_path}/nowhere", tmp_path / "dest")
    assert "\n" not in str(e.value) and "cannot clone" in str(e.value) and "nowhere" in str(e.value)
    assert "does not appear to be a git repository" in str(e.value)
    assert not (tmp_path / "dest").exists()
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not a git clone"):
        commits.clone(f"file://{tmp_path}/nowhere", taken)
    assert (taken / "notes.txt").read_text() == "mine"
