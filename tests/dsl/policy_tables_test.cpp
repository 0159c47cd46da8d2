// Policy tables (`tables:`, dsl/policy_tables.h): loading, every refusal with its exact message
// (the policy's file:line:col, the table file and its own line:col), indexing in programs, the
// values transforms, the geometry check, and head_mode / head_weight's static checks.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "core/util/error.h"
#include "dsl/compiled_program.h"
#include "dsl/interpreter.h"
#include "dsl/policy_dir_test.h"
#include "dsl/policy_file.h"
#include "dsl/policy_tables.h"

namespace kvevict::dsl {
namespace {

namespace fs = std::filesystem;

class PolicyTables : public test::PolicyDirTest {
 protected:
  std::string table_file(const std::string& name) const { return (dir_ / name).string(); }

  // A policy with one table declaration and a score program; returns the compile error ("" if none).
  std::string compile(const std::string& decl, const std::string& score = "score[t] = duo[layer, kv_head] + 0 * pos[t]",
                      const std::string& extra = "") {
    return compile_text("name: p\nabout: a\ntables:\n  duo: " + decl + "\n" + extra + "score: |\n  " + score + "\n");
  }
};

const char* kGood = "{file: duo.tsv, axes: [layer, kv_head], shape: [2, 3]}";

TEST_F(PolicyTables, AGoodTableLoadsAndProgramsReadIt) {
  write("duo.tsv", "# a comment\n0.5\t1.5\t2.5\n\n-1, 2e-1 ,3\n");
  ASSERT_EQ(compile(kGood), "");
  ASSERT_EQ(compiled_.tables.size(), 1u);
  const TableData& t = *compiled_.tables[0];
  EXPECT_EQ(t.name, "duo");
  EXPECT_EQ(t.shape_text(), "[layer 2, kv_head 3]");
  EXPECT_EQ(t.values, (std::vector<float>{0.5f, 1.5f, 2.5f, -1.0f, 0.2f, 3.0f}));
  InterpretedPolicy policy(std::move(compiled_));
  ScoreInputs in;
  in.n_layers = 2;
  in.n_kv_heads = 3;
  in.T = 4;
  in.head_dim = 1;
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 3; ++h) {
      in.layer = l;
      in.kv_head = h;
      std::vector<float> out(4);
      policy.score(in, false, out.data());
      EXPECT_EQ(out, std::vector<float>(4, t.values[l * 3 + h])) << l << " " << h;
    }
  EXPECT_EQ(policy.check_geometry({.n_layers = 2, .n_kv_heads = 3, .head_dim = 8, .n_heads = 6}), "");
  EXPECT_EQ(first_line(policy.check_geometry({.n_layers = 5, .n_kv_heads = 3, .head_dim = 8, .n_heads = 6})),
            "policy 'p' (p.yaml): table 'duo' (DIR/duo.tsv) has shape [layer 2, kv_head 3], but the model has n_layers = 5");
  EXPECT_EQ(first_line(policy.check_geometry({.n_layers = 2, .n_kv_heads = 4, .head_dim = 8, .n_heads = 8})),
            "policy 'p' (p.yaml): table 'duo' (DIR/duo.tsv) has shape [layer 2, kv_head 3], but the model has n_kv_heads = 4");
}

TEST_F(PolicyTables, AChannelTableIsAVectorOverD) {
  write("qf.tsv", "1 2\n3 4\n5 6\n7 8\n");
  ASSERT_EQ(compile("{file: qf.tsv, axes: [layer, kv_head, d], shape: [2, 2, 2]}", "score[t] = sum(d: duo[layer, kv_head, d] * K[d, t])"), "");
  InterpretedPolicy policy(std::move(compiled_));
  ScoreInputs in;
  in.layer = 1;
  in.kv_head = 0;
  in.T = 2;
  in.head_dim = 2;
  const std::vector<float> keys = {1, 10, 100, 1000};  // K[d][t]: k_0 = (1, 100), k_1 = (10, 1000)
  in.set_signal(TensorSignal::Keys, keys.data());
  std::vector<float> out(2);
  policy.score(in, false, out.data());
  EXPECT_EQ(out, (std::vector<float>{5 * 1 + 6 * 100, 5 * 10 + 6 * 1000}));
  EXPECT_EQ(first_line(policy.check_geometry({.n_layers = 2, .n_kv_heads = 2, .head_dim = 4, .n_heads = 4})),
            "policy 'p' (p.yaml): table 'duo' (DIR/qf.tsv) has shape [layer 2, kv_head 2, d 2], but the model has head_dim = 4");
}

TEST_F(PolicyTables, RankAndShareTransforms) {
  write("duo.tsv", "3 1 2\n1 5 0\n");
  ASSERT_EQ(compile("{file: duo.tsv, axes: [layer, kv_head], shape: [2, 3], values: rank}"), "");
  EXPECT_EQ(compiled_.tables[0]->values, (std::vector<float>{4, 1, 3, 2, 5, 0}));  // the two 1s by table order
  ASSERT_EQ(compile("{file: duo.tsv, axes: [layer, kv_head], shape: [2, 3], values: share}"), "");
  EXPECT_FLOAT_EQ(compiled_.tables[0]->values[4], 5.0f / 12.0f);
  write("neg.tsv", "1 -1 0\n0 0 0\n");
  EXPECT_EQ(first_line(compile("{file: neg.tsv, axes: [layer, kv_head], shape: [2, 3], values: share}")),
            "p.yaml:4:71: error: table 'duo' (DIR/neg.tsv): values: share needs numbers >= 0");
  EXPECT_EQ(first_line(compile("{file: duo.tsv, axes: [layer, kv_head], shape: [2, 3], values: sorted}")),
            "p.yaml:4:71: error: table 'duo': 'values' must be one of raw, rank, share");
}

TEST_F(PolicyTables, WrongShapeIsAnErrorAtTheTableFilesLineAndColumn) {
  write("short_row.tsv", "1 2 3\n4 5\n");
  EXPECT_EQ(first_line(compile("{file: short_row.tsv, axes: [layer, kv_head], shape: [2, 3]}")),
            "p.yaml:4:15: error: table 'duo': DIR/short_row.tsv:2:4: row 2 has 2 numbers, the last axis of [layer 2, kv_head 3] has 3");
  write("long_row.tsv", "1 2 3 4\n");
  EXPECT_EQ(first_line(compile("{file: long_row.tsv, axes: [layer, kv_head], shape: [2, 3]}")),
            "p.yaml:4:15: error: table 'duo': DIR/long_row.tsv:1:7: row 1 has more than 3 numbers (the last axis of [layer 2, kv_head 3])");
  write("few_rows.tsv", "1 2 3\n");
  EXPECT_EQ(first_line(compile("{file: few_rows.tsv, axes: [layer, kv_head], shape: [2, 3]}")),
            "p.yaml:4:15: error: table 'duo': DIR/few_rows.tsv: 1 rows, the declared shape [layer 2, kv_head 3] needs 2 rows of 3 numbers");
  write("many_rows.tsv", "1 2 3\n4 5 6\n# fine\n7 8 9\n");
  EXPECT_EQ(first_line(compile("{file: many_rows.tsv, axes: [layer, kv_head], shape: [2, 3]}")),
            "p.yaml:4:15: error: table 'duo': DIR/many_rows.tsv:4:1: more rows than the declared shape [layer 2, kv_head 3] has (2)");
}

TEST_F(PolicyTables, NonNumericAndNonFiniteValuesAreErrorsAtTheirLineAndColumn) {
  write("bad.tsv", "1 2 3\n4 x5 6\n");
  EXPECT_EQ(first_line(compile(std::string("{file: bad.tsv, axes: [layer, kv_head], shape: [2, 3]}"))),
            "p.yaml:4:15: error: table 'duo': DIR/bad.tsv:2:3: 'x5' is not a number");
  write("inf.tsv", "1 2 3\n4 5 inf\n");
  EXPECT_EQ(first_line(compile("{file: inf.tsv, axes: [layer, kv_head], shape: [2, 3]}")),
            "p.yaml:4:15: error: table 'duo': DIR/inf.tsv:2:5: 'inf' is not a finite float");
  write("big.tsv", "1 2 3\n4 5 1e39\n");
  EXPECT_EQ(first_line(compile("{file: big.tsv, axes: [layer, kv_head], shape: [2, 3]}")),
            "p.yaml:4:15: error: table 'duo': DIR/big.tsv:2:5: '1e39' is not a finite float");
  write("nul.tsv", std::string("1 2 3\n4 5\0x 6\n", 14));
  EXPECT_EQ(first_line(compile("{file: nul.tsv, axes: [layer, kv_head], shape: [2, 3]}")),
            "p.yaml:4:15: error: table 'duo': DIR/nul.tsv:2:3: '5?x' is not a number");
  write("long.tsv", "1 2 3\n4 " + std::string(40, 'y') + " 6\n");
  EXPECT_EQ(first_line(compile("{file: long.tsv, axes: [layer, kv_head], shape: [2, 3]}")),
            "p.yaml:4:15: error: table 'duo': DIR/long.tsv:2:3: '" + std::string(32, 'y') + "...' is not a number");
  write("comma.tsv", "1, 2, 3,\n");
  EXPECT_EQ(first_line(compile("{file: comma.tsv, axes: [layer, kv_head], shape: [2, 3]}")),
            "p.yaml:4:15: error: table 'duo': DIR/comma.tsv:1:9: a row may not end with a comma");
}

TEST_F(PolicyTables, SizeLimitsAndFileKindsAreRefused) {
  EXPECT_EQ(first_line(compile("{file: duo.tsv, axes: [layer, kv_head, d], shape: [1000, 1000, 100]}")),
            "p.yaml:4:58: error: table 'duo': [layer 1000, kv_head 1000, d 100] has 100000000 elements, more than the limit of "
            "16777216");
  {
    std::ofstream big(dir_ / "huge.tsv");
    const std::string row(1 << 16, '1');
    for (int i = 0; i < 70; ++i) big << row << '\n';
  }
  EXPECT_EQ(first_line(compile("{file: huge.tsv, axes: [layer], shape: [5]}")),
            "p.yaml:4:15: error: table 'duo': DIR/huge.tsv: the table file is 4587590 bytes; at most 4194304 are allowed for "
            "this kind of file");
  fs::create_directories(dir_ / "folder.tsv");
  EXPECT_EQ(first_line(compile("{file: folder.tsv, axes: [layer], shape: [5]}")),
            "p.yaml:4:15: error: table 'duo': DIR/folder.tsv: the table file must be a regular file; this is a directory");
  EXPECT_NE(compile("{file: missing.tsv, axes: [layer], shape: [5]}").find("missing.tsv"), std::string::npos);
}

TEST_F(PolicyTables, DeclarationErrors) {
  EXPECT_EQ(first_line(compile("{file: duo.tsv, axes: [kv_head, layer], shape: [2, 3]}")),
            "p.yaml:4:40: error: table 'duo': axes must be listed once each, in the order index, layer, kv_head, head, d, e, c");
  EXPECT_EQ(first_line(compile("{file: duo.tsv, axes: [layer, heads], shape: [2, 3]}")),
            "p.yaml:4:38: error: table 'duo': unknown axis 'heads' (axes: index, layer, kv_head, head, d, e, c)");
  EXPECT_EQ(first_line(compile("{file: duo.tsv, axes: [layer, kv_head], shape: [2]}")),
            "p.yaml:4:55: error: table 'duo': 'shape' must list one extent per axis (2 numbers)");
  EXPECT_EQ(first_line(compile("{file: duo.tsv, axes: [layer, kv_head], shape: [2, 0]}")),
            "p.yaml:4:59: error: table 'duo': extent '0' must be a whole number in 1..16777216");
  EXPECT_EQ(first_line(compile("{file: duo.tsv, axes: [layer], shape: [2], colour: red}")),
            "p.yaml:4:51: error: unknown key 'colour' in the declaration of table 'duo' (allowed: axes, file, shape, values)");
  EXPECT_EQ(first_line(compile("{axes: [layer], shape: [2]}")), "p.yaml:4:3: error: table 'duo' needs 'file'");
}

TEST_F(PolicyTables, IndexingErrorsInPrograms) {
  write("duo.tsv", "1 2 3\n4 5 6\n");
  EXPECT_EQ(first_line(compile(kGood, "score[t] = duo[kv_head, layer] + 0 * pos[t]")),
            "p.yaml:6:18: error: index 1 of table 'duo' must be 'layer' (duo has axes [layer, kv_head]), found 'kv_head'");
  EXPECT_EQ(first_line(compile(kGood, "score[t] = duo[layer] + 0 * pos[t]")),
            "p.yaml:6:14: error: table 'duo' has axes [layer, kv_head] and takes 2 indices, not 1");
  EXPECT_EQ(first_line(compile(kGood, "score[t] = duo + 0 * pos[t]")),
            "p.yaml:6:14: error: 'duo' is a table; index it, e.g. duo[layer, kv_head]");
  EXPECT_EQ(first_line(compile(kGood, "score[t] = qf[layer, kv_head] + 0 * pos[t]")),
            "p.yaml:6:14: error: unknown tensor 'qf'");
  EXPECT_EQ(first_line(compile(kGood, "duo = 1\n  score[t] = pos[t]")),
            "p.yaml:6:3: error: 'duo' is a table and cannot be redefined");
  write("qf.tsv", "1 2\n3 4\n5 6\n7 8\n");
  EXPECT_EQ(first_line(compile("{file: qf.tsv, axes: [layer, kv_head, d], shape: [2, 2, 2]}", "score[t] = duo[layer, kv_head, d] + pos[t]")),
            "p.yaml:6:34: error: axis 'd' is not bound here: declare it on the left side or reduce over it");
  EXPECT_EQ(first_line(compile(kGood, "score[t] = pos[t]", "layer_weight: |\n  layer_weight = duo[layer, kv_head]\n")),
            "p.yaml:6:29: error: table 'duo' is per KV head; in layer_weight programs index it along axis g, e.g. duo[layer, g]");
  EXPECT_EQ(compile(kGood, "score[t] = pos[t]", "layer_weight: |\n  layer_weight = sum(g: duo[layer, g])\n"), "");
}

TEST_F(PolicyTables, HeadProgramsAndTheirStaticChecks) {
  write("duo.tsv", "1 2 3\n4 5 6\n");
  const std::string mode = "head_mode: |\n  head_mode = if(duo[layer, kv_head] > 2, full, streaming)\n";
  ASSERT_EQ(compile(kGood, "score[t] = pos[t]", mode), "");
  EXPECT_TRUE(compiled_.desc.has_head_plan);
  {
    InterpretedPolicy policy(std::move(compiled_));
    ScoreInputs in;
    in.layer = 0;
    in.kv_head = 1;
    EXPECT_EQ(policy.head_plan(in).mode, HeadMode::Streaming);
    in.kv_head = 2;
    EXPECT_EQ(policy.head_plan(in).mode, HeadMode::Full);
    EXPECT_EQ(policy.head_plan(in).weight, 1.0);
  }
  ASSERT_EQ(compile(kGood, "score[t] = pos[t]", "head_weight: |\n  head_weight = duo[layer, kv_head] - 2\n"), "");
  {
    InterpretedPolicy policy(std::move(compiled_));
    ScoreInputs in;
    in.layer = 1;
    in.kv_head = 2;
    EXPECT_EQ(policy.head_plan(in).mode, HeadMode::Compressed);
    EXPECT_EQ(policy.head_plan(in).weight, 4.0);
    in.layer = 0;
    in.kv_head = 0;
    EXPECT_EQ(policy.head_plan(in).weight, 0.0);  // negative weights count as 0
  }
  EXPECT_EQ(first_line(compile(kGood, "score[t] = pos[t]", mode + "select: {scope: layer}\n")),
            "p.yaml:5:12: error: 'head_mode' needs select scope kv_head (scope layer decides the heads' budgets itself)");
  EXPECT_EQ(first_line(compile(kGood, "score[t] = pos[t]", mode + "run: {cascading: true}\n")),
            "p.yaml:5:12: error: 'head_mode' cannot be combined with run.cascading");
  EXPECT_EQ(first_line(compile(kGood, "score[t] = pos[t]", "head_weight: |\n  w = 1\n")),
            "p.yaml:5:14: error: the program must define the scalar 'head_weight'");
  EXPECT_EQ(first_line(compile(kGood, "score[t] = pos[t]", "head_mode: |\n  head_mode[t] = pos[t]\n")),
            "p.yaml:6:3: error: 'head_mode' must be a scalar: head_mode = ...");
  EXPECT_EQ(first_line(compile(kGood, "score[t] = full", "")), "p.yaml:6:14: error: unknown name 'full'");
}

}  // namespace
}  // namespace kvevict::dsl
