// The report on a hand-made database: what the page says (provenance, intervals, human-readable
// bytes, iso-quality), the log kept-fraction axis, and the page as a real headless browser
// (Debian's chromium, installed by scripts/setup.sh) parses and draws it.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include "evals/leaderboard_fixture.h"
#include "evals/markup_check.h"
#include "evals/report.h"

using namespace kvevict::evals;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string chromium_binary() {
  for (const char* path : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (std::filesystem::exists(path)) return path;
  }
  return "";
}

// Runs a shell command, returns its stdout ("" when it fails to start).
std::string run(const std::string& command, int* status) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  *status = pclose(pipe);
  return out;
}

}  // namespace

TEST(ReportPage, ProvenanceIntervalsBytesAndIsoQuality) {
  kvevict::test::HandMadeDb db("report_page");
  ResultsStore store(db.path);
  ReportFiles files = write_report(store, (db.dir / "report").string());
  std::string html = read_text(files.index);
  EXPECT_EQ(kvevict::test::check_markup(html, true), "");
  for (const char* fact : {"/models/tiny-model.gguf", "feedface00112233", "abc1234", "cfg0123456789abcdef", "9.9.9",
                           "<td>cpu</td><td>host</td>"}) {
    EXPECT_NE(html.find(fact), std::string::npos) << fact;
  }
  EXPECT_NE(html.find("37.5 [13.7, 69.4]"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"significant\">-62.5 [-87.8, -25.0]</td>"), std::string::npos);
  EXPECT_NE(html.find("<td>65.0%</td>"), std::string::npos);
  EXPECT_NE(html.find("<td>8.96 MiB</td>"), std::string::npos);  // kv_bytes_full 9395973 at full
  EXPECT_EQ(html.find("9395973"), std::string::npos);
  // One score plot and one iso-quality chart; no depth grid here, so no heatmap.
  ASSERT_EQ(files.svgs.size(), 2u);
  for (const auto& svg : files.svgs) EXPECT_EQ(kvevict::test::check_markup(read_text(svg), false), "") << svg;
  std::string bars = read_text(files.svgs[1]);
  EXPECT_EQ(count(bars, "class=\"bar\""), 3u);
  EXPECT_NE(bars.find("&lt; 25.0%"), std::string::npos);
  EXPECT_NE(bars.find("&gt; 75.0%"), std::string::npos);
}

TEST(ReportPage, ScorePlotHasALogKeptFractionAxisAndBands) {
  kvevict::test::HandMadeDb db("report_axis");
  ResultsStore store(db.path);
  ReportFiles files = write_report(store, (db.dir / "report").string());
  std::string svg = read_text(files.svgs[0]);
  EXPECT_EQ(count(svg, "class=\"band\""), 3u);  // one interval band per policy
  for (const char* tick : {">20%<", ">50%<", ">100%<"}) EXPECT_NE(svg.find(tick), std::string::npos) << tick;
  // snap's points at kept fractions 0.25, 0.5, 0.75, 1: on a log axis 0.25 -> 0.5 and 0.5 -> 1 are
  // the same distance (a factor 2 each), on a linear one they would differ by 2x.
  size_t group = svg.find("data-policy=\"snap\"");
  ASSERT_NE(group, std::string::npos);
  std::string part = svg.substr(group, svg.find("</g>", group) - group);
  std::vector<double> xs;
  std::regex circle("<circle cx=\"([0-9.]+)\"");
  for (auto it = std::sregex_iterator(part.begin(), part.end(), circle); it != std::sregex_iterator(); ++it)
    xs.push_back(std::stod((*it)[1]));
  ASSERT_EQ(xs.size(), 4u);
  EXPECT_NEAR(xs[1] - xs[0], xs[3] - xs[1], 0.2);
  EXPECT_GT(xs[1] - xs[0], 50);
}

TEST(ReportPage, HeadlessChromiumRendersThePage) {
  const std::string chromium = chromium_binary();
  if (chromium.empty()) GTEST_SKIP() << "chromium is not installed (scripts/setup.sh installs Debian's chromium)";
  kvevict::test::HandMadeDb db("report_browser");
  ResultsStore store(db.path);
  ReportFiles files = write_report(store, (db.dir / "report").string());
  const std::string profile = (db.dir / "profile").string();
  const std::string flags = " --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir=" + profile;
  const std::string url = "file://" + std::filesystem::absolute(files.index).string();
  int status = -1;
  std::string dom = run("timeout 180 " + chromium + flags + " --dump-dom " + url + " 2>/dev/null", &status);
  ASSERT_EQ(status, 0) << "chromium --dump-dom failed";
  // What the browser parsed: the provenance table, both plots, the leaderboard and difference tables.
  EXPECT_NE(dom.find("<table class=\"provenance\" id=\"provenance\">"), std::string::npos) << dom;
  EXPECT_NE(dom.find("feedface00112233"), std::string::npos);
  EXPECT_EQ(count(dom, "<img class=\"plot\""), 2u) << dom;
  EXPECT_EQ(count(dom, "<table class=\"scores\">"), 1u);
  EXPECT_EQ(count(dom, "<table class=\"diff\">"), 1u);
  EXPECT_NE(dom.find("8.96 MiB"), std::string::npos);
  // And it draws it: a PNG screenshot of the page.
  const std::string png = (db.dir / "page.png").string();
  run("timeout 180 " + chromium + flags + " --window-size=1200,1600 --screenshot=" + png + " " + url +
          " >/dev/null 2>&1",
      &status);
  ASSERT_EQ(status, 0) << "chromium --screenshot failed";
  std::string image = read_text(png);
  ASSERT_GT(image.size(), 10000u);
  EXPECT_EQ(image.substr(1, 3), "PNG");
}
