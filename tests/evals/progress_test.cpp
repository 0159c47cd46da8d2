// Progress output: plain lines off a terminal, a redrawn bar on one, nothing when quiet.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "evals/progress.h"

using kvevict::evals::Progress;

namespace {

std::string drain(FILE* file) {
  std::fflush(file);
  std::rewind(file);
  std::string text;
  char buffer[512];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) text.append(buffer, n);
  return text;
}

}  // namespace

TEST(Progress, PlainLinesAreThrottledButTheEndIsAlwaysPrinted) {
  FILE* out = std::tmpfile();
  {
    Progress progress(Progress::Mode::Lines, "run", 10, 2, out, 3600.0);
    for (int i = 0; i < 8; ++i) progress.advance();
    progress.finish();
  }
  std::string text = drain(out);
  std::fclose(out);
  // The first line (2 already done) and the last; the throttle hides the steps in between.
  EXPECT_NE(text.find("run: 2/10 results (20%)"), std::string::npos) << text;
  EXPECT_NE(text.find("run: 10/10 results (100%)"), std::string::npos) << text;
  EXPECT_EQ(text.find("run: 5/10"), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos);
}

TEST(Progress, BarRedrawsInPlaceWithEta) {
  FILE* out = std::tmpfile();
  {
    Progress progress(Progress::Mode::Bar, "run", 4, 0, out);
    progress.advance(2);
    progress.finish();
  }
  std::string text = drain(out);
  std::fclose(out);
  EXPECT_NE(text.find("\rrun ["), std::string::npos) << text;
  EXPECT_NE(text.find("2/4"), std::string::npos);
  EXPECT_NE(text.find("ETA"), std::string::npos);
  EXPECT_EQ(text.back(), '\n');
}

TEST(Progress, QuietPrintsNothing) {
  FILE* out = std::tmpfile();
  {
    Progress progress(Progress::Mode::Quiet, "run", 4, 0, out);
    progress.advance(4);
    progress.finish();
  }
  EXPECT_EQ(drain(out), "");
  std::fclose(out);
  EXPECT_EQ(Progress::detect(true), Progress::Mode::Quiet);
  EXPECT_EQ(Progress::format_duration(75), "1m15s");
  EXPECT_EQ(Progress::format_duration(3 * 3600 + 120), "3h02m");
}
