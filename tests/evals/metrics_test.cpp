// Each metric against values computed by hand (the arithmetic is in the comments).
#include <gtest/gtest.h>

#include <cmath>

#include "evals/metrics/metrics.h"

using namespace kvevict::evals;

TEST(Metrics, NormalizeAnswerFollowsLongBench) {
  EXPECT_EQ(normalize_answer("The  Quick, brown fox!"), "quick brown fox");
  EXPECT_EQ(normalize_answer("An apple a day"), "apple day");
  EXPECT_EQ(normalize_answer("theory"), "theory");  // articles only as whole words
}

TEST(Metrics, QaF1) {
  // pred -> "cat sat on mat" (4), ref -> "cat on mat" (3); common 3; P = 3/4, R = 1; F1 = 1.5/1.75.
  EXPECT_NEAR(qa_f1("The cat sat on the mat", "a cat on a mat"), 1.5 / 1.75, 1e-12);
  EXPECT_DOUBLE_EQ(qa_f1("Paris", "paris."), 1.0);
  EXPECT_DOUBLE_EQ(qa_f1("London", "Paris"), 0.0);
  EXPECT_DOUBLE_EQ(qa_f1("", "Paris"), 0.0);
  // Repeated words count once per occurrence: pred "a b b" vs ref "b" -> common 1, P 1/3, R 1 -> 0.5.
  EXPECT_NEAR(qa_f1("x y y", "y"), 0.5, 1e-12);
}

TEST(Metrics, RougeL) {
  // LCS("the cat sat on the mat", "the cat on the mat") = 5; P = 5/6, R = 5/5; F = 10/11.
  EXPECT_NEAR(rouge_l("the cat sat on the mat", "the cat on the mat"), 10.0 / 11.0, 1e-12);
  // Order matters: LCS("a b c d", "d c b a") = 1; P = R = 1/4; F = 1/4.
  EXPECT_NEAR(rouge_l("a b c d", "d c b a"), 0.25, 1e-12);
  EXPECT_DOUBLE_EQ(rouge_l("x", "y"), 0.0);
}

TEST(Metrics, ClassificationAccuracy) {
  std::vector<std::string> classes = {"LOC", "NUM", "HUM", "DESC"};
  EXPECT_DOUBLE_EQ(classification_accuracy("Type: LOC or NUM", "LOC", classes), 0.5);  // 2 named, right one among them
  EXPECT_DOUBLE_EQ(classification_accuracy("LOC", "LOC", classes), 1.0);
  EXPECT_DOUBLE_EQ(classification_accuracy("HUM", "LOC", classes), 0.0);
  // "abbreviation" is a proper substring of the reference, so it is dropped: 1 class left.
  std::vector<std::string> nested = {"abbreviation", "abbreviation expansion"};
  EXPECT_DOUBLE_EQ(classification_accuracy("abbreviation expansion", "abbreviation expansion", nested), 1.0);
}

TEST(Metrics, RetrievalAndCount) {
  EXPECT_DOUBLE_EQ(retrieval_score("Paragraph 12 or maybe 3", "Paragraph 12"), 0.5);  // numbers 12, 3
  EXPECT_DOUBLE_EQ(retrieval_score("Paragraph 12", "Paragraph 12"), 1.0);
  EXPECT_DOUBLE_EQ(retrieval_score("no idea", "Paragraph 12"), 0.0);
  EXPECT_DOUBLE_EQ(count_score("There are 7 unique, not 8", "7"), 0.5);
  EXPECT_DOUBLE_EQ(count_score("17", "7"), 0.0);  // whole numbers, not digits
}

TEST(Metrics, CodeEditSimilarity) {
  // LCS("kitten", "sitting") = "ittn" (4): indel = 6 + 7 - 8 = 5.
  EXPECT_EQ(indel_distance("kitten", "sitting"), 5);
  EXPECT_EQ(indel_distance("", "abc"), 3);
  // The comment line is skipped; "x = foo(a, b)" (13) vs "x = foo(a)" (10): LCS 10, indel 3,
  // ratio 1 - 3/23 = 0.8696 -> 0.87.
  EXPECT_DOUBLE_EQ(code_edit_similarity("\n# comment\nx = foo(a, b)\nmore", "x = foo(a)"), 0.87);
  EXPECT_DOUBLE_EQ(code_edit_similarity("return y;", "return y;"), 1.0);
}

TEST(Metrics, Matches) {
  EXPECT_DOUBLE_EQ(exact_match("The Answer!", "answer"), 1.0);
  EXPECT_DOUBLE_EQ(exact_match("answers", "answer"), 0.0);
  EXPECT_DOUBLE_EQ(contains_match("the pass key is 12345.", "12345"), 1.0);
  EXPECT_DOUBLE_EQ(contains_match("the pass key is 1234", "12345"), 0.0);
  EXPECT_NEAR(contains_all("a1 and c3", {"a1", "b2", "c3"}), 2.0 / 3.0, 1e-12);
}

TEST(Metrics, KlDivergenceAndTop1) {
  // p = softmax([0, ln 3]) = [1/4, 3/4]; q = softmax([0, 0]) = [1/2, 1/2].
  const float p[2] = {0.0f, static_cast<float>(std::log(3.0))};
  const float q[2] = {0.0f, 0.0f};
  double expected = 0.25 * std::log(0.25 / 0.5) + 0.75 * std::log(0.75 / 0.5);
  EXPECT_NEAR(kl_divergence(p, q, 2), expected, 1e-6);
  EXPECT_NEAR(kl_divergence(p, p, 2), 0.0, 1e-12);
  const float a[3] = {1, 2, 3}, b[3] = {3, 2, 1};
  EXPECT_FALSE(top1_agrees(a, b, 3));
  EXPECT_TRUE(top1_agrees(a, a, 3));
  // Large logits do not overflow.
  const float big[2] = {1000.0f, 0.0f}, big2[2] = {0.0f, 1000.0f};
  EXPECT_NEAR(kl_divergence(big, big2, 2), 1000.0, 1e-3);
}

TEST(Metrics, SequenceAgreement) {
  EXPECT_DOUBLE_EQ(sequence_agreement({1, 2, 3, 4}, {1, 2, 5}), 0.5);
  EXPECT_DOUBLE_EQ(sequence_agreement({}, {}), 1.0);
}

TEST(Metrics, DispatchTakesTheBestReference) {
  EXPECT_DOUBLE_EQ(score_prediction("qa_f1", "Paris", {"London", "Paris"}), 1.0);
  EXPECT_DOUBLE_EQ(score_prediction("contains_all", "x and y", {"x", "y", "z"}), 2.0 / 3.0);
  EXPECT_THROW(score_prediction("bleu", "a", {"a"}), std::invalid_argument);
  EXPECT_TRUE(is_known_metric("rouge_l"));
  EXPECT_FALSE(is_known_metric("bleu"));
}
