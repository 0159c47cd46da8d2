// The table axes beyond [layer, kv_head, d] (dsl/table_data.h): the scalar-indexed leading axis
// `index` (LUKV's curve row), the query-head axis `head` read along h, and the second channel axis
// `e`; their reads in the interpreter against hand-computed values, their bounds, and every
// refusal with its golden file:line:col message. select.head_allocation's static check too.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "core/util/error.h"
#include "dsl/compiled_program.h"
#include "dsl/policy_dir_test.h"
#include "dsl/policy_file.h"
#include "dsl/policy_tables.h"

namespace kvevict::dsl {
namespace {

namespace fs = std::filesystem;

class TableAxes : public test::PolicyDirTest {
 protected:
  // A policy with the given `tables:` body (indented lines), extra keys and a score program.
  std::string compile(const std::string& tables, const std::string& score, const std::string& extra = "") {
    return compile_text("name: p\nabout: a\nparams:\n  r: {float: 1, min: -100, max: 100}\ntables:\n" + tables + extra +
                        "score: |\n  " + score + "\n");
  }
};

// cur [index 3, layer 2, kv_head 2]: value 100 r + 10 l + k.
const char* kCurve = "  cur: {file: cur.tsv, axes: [index, layer, kv_head], shape: [3, 2, 2]}\n";

TEST_F(TableAxes, TheIndexAxisIsReadAtARoundedScalar) {
  write("cur.tsv", "0 1\n10 11\n100 101\n110 111\n200 201\n210 211\n");
  const std::string score = "row = r + 0.4\n  score[t] = cur[row, layer, kv_head] + 0 * pos[t]";
  struct Case { std::string r; float want; };
  for (const Case& c : {Case{"1", 111}, Case{"2", 211}, Case{"0", 11}, Case{"1.2", 211}, Case{"-1", 0}, Case{"3", 0}}) {
    const std::string text = "name: p\nabout: a\nparams:\n  r: {float: " + c.r + ", min: -100, max: 100}\ntables:\n" + kCurve +
                             "score: |\n  " + score + "\n";
    InterpretedPolicy policy(compile_policy_text(policy_path(), text));
    ScoreInputs in;
    in.layer = 1;
    in.kv_head = 1;
    in.T = 2;
    in.head_dim = 1;
    std::vector<float> out(2);
    policy.score(in, false, out.data());
    // r + 0.4 rounds to the nearest row; rows outside 0..2 read 0.
    EXPECT_EQ(out, std::vector<float>(2, c.want)) << "r = " << c.r;
  }
  // The index axis is the policy's own: the geometry check ignores its extent.
  InterpretedPolicy policy(compile_policy_text(policy_path(), "name: p\nabout: a\ntables:\n" + std::string(kCurve) +
                                                                   "score: |\n  score[t] = cur[n_layers, layer, kv_head] + pos[t]\n"));
  EXPECT_EQ(policy.check_geometry({.n_layers = 2, .n_kv_heads = 2, .head_dim = 8, .n_heads = 4}), "");
}

TEST_F(TableAxes, HeadAndSecondChannelAxesReadTheGroupsQueryHeads) {
  // m [layer 1, head 4, d 2, e 2] = 1000 head + 10 d + e; G = 2, so KV head 1 reads heads 2 and 3.
  std::string rows;
  for (int h = 0; h < 4; ++h)
    for (int d = 0; d < 2; ++d) rows += std::to_string(1000 * h + 10 * d) + " " + std::to_string(1000 * h + 10 * d + 1) + "\n";
  write("m.tsv", rows);
  write("mu.tsv", "1 2\n3 4\n5 6\n7 8\n");
  const std::string tables = "  m: {file: m.tsv, axes: [layer, head, d, e], shape: [1, 4, 2, 2]}\n"
                             "  mu: {file: mu.tsv, axes: [layer, head, d], shape: [1, 4, 2]}\n";
  // x[t] = sum over h, d, e of m[h, d, e] * K[d, t] * K[e, t] + mu[h, d] K[d, t]; the transposed
  // read m[layer, h, e, d] gives the same sum (m is read at (e, d)), so y doubles the symmetric part.
  ASSERT_EQ(compile(tables, "x[t] = sum(h: sum(d: sum(e: m[layer, h, d, e] * K[d, t] * K[e, t]) + mu[layer, h, d] * K[d, t]))\n"
                            "  y[t] = sum(h: sum(d: sum(e: m[layer, h, e, d] * K[d, t] * K[e, t])))\n"
                            "  score[t] = x[t] * 1000000 + y[t]"),
            "");
  InterpretedPolicy policy(std::move(compiled_));
  ScoreInputs in;
  in.layer = 0;
  in.kv_head = 1;
  in.group = 2;
  in.T = 2;
  in.head_dim = 2;
  const std::vector<float> keys = {1, 0, 0, 1};  // K[d][t]: k_0 = (1, 0), k_1 = (0, 1)
  in.set_signal(TensorSignal::Keys, keys.data());
  std::vector<float> out(2);
  policy.score(in, false, out.data());
  // t = 0: only d = e = 0: m[2,0,0] + m[3,0,0] = 5000, mu[2,0] + mu[3,0] = 5 + 7 = 12; y = 5000.
  // t = 1: d = e = 1: 2011 + 3011 = 5022, mu 6 + 8 = 14; y = 5022.
  EXPECT_EQ(out, (std::vector<float>{5012.0f * 1000000 + 5000, 5036.0f * 1000000 + 5022}));
  EXPECT_EQ(policy.check_geometry({.n_layers = 1, .n_kv_heads = 2, .head_dim = 2, .n_heads = 4}), "");
  EXPECT_EQ(first_line(policy.check_geometry({.n_layers = 1, .n_kv_heads = 2, .head_dim = 2, .n_heads = 8})),
            "policy 'p' (p.yaml): table 'm' (DIR/m.tsv) has shape [layer 1, head 4, d 2, e 2], but the model has n_heads = 8");
  EXPECT_EQ(first_line(policy.check_geometry({.n_layers = 1, .n_kv_heads = 2, .head_dim = 4, .n_heads = 4})),
            "policy 'p' (p.yaml): table 'm' (DIR/m.tsv) has shape [layer 1, head 4, d 2, e 2], but the model has head_dim = 4");
}

TEST_F(TableAxes, DeclarationErrors) {
  write("cur.tsv", "1\n");
  EXPECT_EQ(first_line(compile("  cur: {file: cur.tsv, axes: [layer, index], shape: [2, 3]}\n", "score[t] = pos[t]")),
            "p.yaml:6:38: error: table 'cur': axes must be listed once each, in the order index, layer, kv_head, head, d, e, c");
  EXPECT_EQ(first_line(compile("  cur: {file: cur.tsv, axes: [layer, kv_head, head], shape: [2, 3, 4]}\n", "score[t] = pos[t]")),
            "p.yaml:6:30: error: table 'cur': a table is per KV head (kv_head) or per query head (head), not both");
  EXPECT_EQ(first_line(compile("  cur: {file: cur.tsv, axes: [index, layer, kv_head, head, d, e, c], shape: [1, 1, 1, 1, 1, 1, 1]}\n",
                               "score[t] = pos[t]")),
            "p.yaml:6:30: error: table 'cur': 'axes' must be a list of 1 to 6 of index, layer, kv_head, head, d, e, c (in that order)");
  // The policy's tables together: three of 2^24 numbers are refused at the third's shape (the
  // files are missing, which is reported too; the bound is checked before any file is read).
  const std::string big = "axes: [layer, head, d, e], shape: [1024, 16, 32, 32]}\n";
  const std::string all = compile("  a: {file: a.tsv, " + big + "  b: {file: b.tsv, " + big + "  c: {file: c.tsv, " + big,
                                  "score[t] = pos[t]");
  EXPECT_NE(first_line(all).find("table 'a'"), std::string::npos) << all;
  EXPECT_NE(all.find("p.yaml:8:54: error: table 'c': the policy's tables would hold 50331648 numbers, more than the limit of 33554432"),
            std::string::npos)
      << all;
  // A declared table's file may be 24 bytes a number (or 4 MiB): a 1-number table's file is capped at 4 MiB.
  TableData t;
  t.has[static_cast<int>(TableAxis::Layer)] = true;
  t.extent[static_cast<int>(TableAxis::Layer)] = 1;
  EXPECT_EQ(max_table_file_bytes(t), size_t{4} << 20);
  t.extent[static_cast<int>(TableAxis::Layer)] = 1 << 20;
  EXPECT_EQ(max_table_file_bytes(t), size_t{24} << 20);
}

TEST_F(TableAxes, IndexingErrors) {
  write("cur.tsv", "0 1\n10 11\n100 101\n110 111\n200 201\n210 211\n");
  EXPECT_EQ(first_line(compile(kCurve, "score[t] = cur[t, layer, kv_head]")),
            "p.yaml:8:18: error: index 1 of table 'cur' must be a scalar name (a parameter or a scalar definition) (cur has "
            "axes [index, layer, kv_head]), found 't'");
  EXPECT_EQ(first_line(compile(kCurve, "x[t] = pos[t]\n  score[t] = cur[x, layer, kv_head]")),
            "p.yaml:9:18: error: 'x' is a tensor [t]; index it, e.g. x[t]");
  EXPECT_EQ(first_line(compile(kCurve, "score[t] = cur[nope, layer, kv_head]")), "p.yaml:8:18: error: unknown name 'nope'");
  EXPECT_EQ(first_line(compile(kCurve, "score[t] = cur[true, layer, kv_head]")),
            "p.yaml:8:18: error: index 1 of table 'cur' must be a number without axes (the row to read), found 'true'");
  EXPECT_EQ(first_line(compile(kCurve, "score[t] = cur[r, kv_head, layer]")),
            "p.yaml:8:21: error: index 2 of table 'cur' must be 'layer' (cur has axes [index, layer, kv_head]), found 'kv_head'");
  write("m.tsv", "1 2\n3 4\n");
  const std::string m = "  m: {file: m.tsv, axes: [head, d, e], shape: [1, 2, 2]}\n";
  EXPECT_EQ(first_line(compile(m, "score[t] = sum(d: sum(e: m[q, d, e])) + pos[t]")),
            "p.yaml:8:30: error: index 1 of table 'm' must be 'h' (the query head of the group) (m has axes [head, d, e]), found 'q'");
  EXPECT_EQ(first_line(compile(m, "score[t] = sum(d: sum(e: m[h, d, e])) + pos[t]")),
            "p.yaml:8:30: error: axis 'h' is not bound here: declare it on the left side or reduce over it");
  EXPECT_EQ(first_line(compile(m, "score[t] = sum(h: sum(d: m[h, d, d])) + pos[t]")),
            "p.yaml:8:36: error: axis 'd' is used twice in this read of 'm' (a diagonal is not available)");
  EXPECT_EQ(first_line(compile(m, "score[t] = sum(h: sum(d: m[h, d, t])) + pos[t]")),
            "p.yaml:8:36: error: index 3 of table 'm' must be 'd' or 'e' (m has axes [head, d, e]), found 't'");
  EXPECT_EQ(first_line(compile(m, "score[t] = sum(h: sum(d: m[h, d, e])) + pos[t]")),
            "p.yaml:8:36: error: axis 'e' is not bound here: declare it on the left side or reduce over it");
}

TEST_F(TableAxes, HeadAllocationTokensNeedsAHeadWeight) {
  write("cur.tsv", "0 1\n10 11\n100 101\n110 111\n200 201\n210 211\n");
  EXPECT_EQ(first_line(compile(kCurve, "score[t] = pos[t]", "select: {head_allocation: tokens}\n")),
            "p.yaml:7:27: error: 'head_allocation: tokens' reads each head's count from a head_weight program; the file has none");
  EXPECT_EQ(first_line(compile(kCurve, "score[t] = pos[t]", "select: {head_allocation: counts}\n")),
            "p.yaml:7:27: error: 'head_allocation' must be one of share, tokens (or an enum parameter with those options)");
  ASSERT_EQ(compile(kCurve, "score[t] = pos[t]",
                    "select: {head_allocation: tokens}\nhead_weight: |\n  head_weight = (1 - cur[r, layer, kv_head] / 1000) * T\n"),
            "");
  EXPECT_EQ(compiled_.desc.select.head_allocation, HeadAllocation::Tokens);
  InterpretedPolicy policy(std::move(compiled_));
  ScoreInputs in;
  in.layer = 0;
  in.kv_head = 1;
  in.T = 50;
  EXPECT_DOUBLE_EQ(policy.head_plan(in).weight, static_cast<double>((1 - 101.0f / 1000) * 50));
}

}  // namespace
}  // namespace kvevict::dsl
