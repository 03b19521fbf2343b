// `qmvlab sweep` and `qmvlab merge` end to end, on tiny real runs of scalar kernels.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "harness/csv.h"
#include "harness/experiment.h"
#include "tests/cli_run.h"
#include "tests/scoped_env.h"

namespace {

using qmv::testing::CliRun;
using qmv::testing::count_lines;
using qmv::testing::expect_error;
using qmv::testing::qmvlab;
using qmv::testing::tmp;

std::string write_experiment(const std::string& file, const std::string& extra = "") {
  const std::string path = tmp(file);
  std::ofstream(path) << "name = \"tiny\"\n"
                         "kernels = [\"q4_K.cpu.scalar_f32\", \"q6_K.cpu.scalar*\", \"!*batch*\"]\n"
                         "shapes = [\"1x256\", \"3x512:attn_q\", \"3x100\"]\n"
                         "threads = [1]\n"
                         "cache = [\"warm\"]\n"
                         "repetitions = 1\n"
                         "min_time = 0.002\n"
                      << extra;
  return path;
}

std::set<std::string> keys_of(const qmv::CsvTable& t) {
  std::set<std::string> k;
  for (std::size_t i = 0; i < t.rows.size(); ++i) k.insert(t.key(i));
  return k;
}

TEST(SweepCli, TinySweepWritesACsvReportReads) {
  const std::string exp = write_experiment("tiny.toml");
  const std::string out = tmp("tiny.csv");
  const CliRun r = qmvlab("sweep " + exp + " --out " + out + " --peak-reps 1 --peak-buffer-mib 64");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(qmv::detect_csv_kind(out), qmv::CsvKind::Sweep);
  const qmv::CsvTable t = qmv::read_sweep_csv(out);
  ASSERT_EQ(t.rows.size(), 3u * 3u);  // 3 kernels x 3 shapes, 1 thread, 1 cache
  EXPECT_EQ(keys_of(t).size(), t.rows.size());
  int ok = 0, skipped = 0;
  for (const auto& row : t.rows) {
    const std::string status = row[t.column("status")];
    EXPECT_EQ(row[t.column("experiment")], "tiny");
    if (row[t.column("cols")] == "100") {
      EXPECT_EQ(status, "skipped");
      EXPECT_NE(row[t.column("reason")].find("shape not supported"), std::string::npos);
      EXPECT_EQ(row[t.column("gbps_median")], "");
      ++skipped;
      continue;
    }
    EXPECT_EQ(status, "ok") << row[t.column("reason")];
    EXPECT_GT(std::stod(row[t.column("gbps_median")]), 0);
    EXPECT_GT(std::stod(row[t.column("peak_gbps")]), 0);
    EXPECT_EQ(row[t.column("check_passed")], "1");
    EXPECT_LT(std::stod(row[t.column("nmse_kernel")]), 1e-6);
    EXPECT_EQ(row[t.column("model_op")], row[t.column("rows")] == "3" ? "attn_q" : "");
    ++ok;
  }
  EXPECT_EQ(ok, 6);
  EXPECT_EQ(skipped, 3);
  EXPECT_EQ(count_lines(r.output, "% of peak, check pass NMSE"), 6) << r.output;
  const CliRun rep = qmvlab("report " + out);
  ASSERT_EQ(rep.code, 0) << rep.output;
  EXPECT_NE(rep.output.find("q6_K.cpu.scalar_q8k"), std::string::npos) << rep.output;
  EXPECT_NE(rep.output.find("attn_q"), std::string::npos) << rep.output;
  // A dry run lists the points and writes nothing.
  const CliRun dry = qmvlab("sweep " + exp + " --out " + tmp("dry.csv") + " --dry-run");
  ASSERT_EQ(dry.code, 0) << dry.output;
  EXPECT_EQ(count_lines(dry.output, "skip: shape not supported"), 3) << dry.output;
  EXPECT_FALSE(std::filesystem::exists(tmp("dry.csv")));
}

TEST(SweepCli, ResumeRunsExactlyTheMissingPoints) {
  const std::string exp = write_experiment("resume.toml", "check = false\n");
  const std::string full = tmp("resume-full.csv"), part = tmp("resume.csv");
  ASSERT_EQ(qmvlab("sweep " + exp + " --out " + full + " --peak-reps 1 --peak-buffer-mib 64").code, 0);
  const qmv::CsvTable all = qmv::read_sweep_csv(full);
  // An interrupted sweep: the header, three rows, and half of the fourth.
  std::ifstream in(full);
  std::string line, text;
  for (int i = 0; i < 4 && std::getline(in, line); ++i) text += line + "\n";
  std::getline(in, line);
  text += line.substr(0, line.size() / 2);
  std::ofstream(part, std::ios::trunc) << text;
  std::set<std::string> kept;
  for (std::size_t i = 0; i < 3; ++i) kept.insert(all.key(i));
  int missing_runnable = 0;
  for (std::size_t i = 3; i < all.rows.size(); ++i) missing_runnable += all.rows[i][all.column("status")] != "skipped";

  const CliRun r = qmvlab("sweep " + exp + " --out " + part + " --resume --peak-reps 1 --peak-buffer-mib 64");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("3 already in the CSV"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("dropping a cut-short last line"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(std::to_string(missing_runnable) + " point(s) run"), std::string::npos) << r.output;
  for (const auto& k : kept) {
    const std::string kernel = k.substr(0, k.find('|'));
    const std::string shape = k.substr(kernel.size() + 1, k.find('|', kernel.size() + 1) - kernel.size() - 1);
    EXPECT_EQ(r.output.find("] " + kernel + " " + shape + " "), std::string::npos) << k << " ran again";
  }
  const qmv::CsvTable after = qmv::read_sweep_csv(part);
  EXPECT_EQ(after.rows.size(), all.rows.size());
  EXPECT_EQ(keys_of(after), keys_of(all));
  // Nothing left: a second resume runs nothing.
  const CliRun again = qmvlab("sweep " + exp + " --out " + part + " --resume --peak-reps 1 --peak-buffer-mib 64");
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_NE(again.output.find("0 point(s) run"), std::string::npos) << again.output;
  // Another experiment's file is refused.
  const std::string other = tmp("other.toml");
  std::ofstream(other) << "name = \"other\"\nkernels = [\"q4_K.cpu.scalar_f32\"]\nshapes = [\"1x256\"]\n";
  expect_error("sweep " + other + " --out " + part + " --resume", "belongs to experiment 'tiny', not 'other'");
}

TEST(SweepCli, ShardsMergeIntoTheWholeSweep) {
  const std::string exp = write_experiment("shard.toml", "check = false\n");
  const std::string whole = tmp("shard-whole.csv");
  ASSERT_EQ(qmvlab("sweep " + exp + " --out " + whole + " --dry-run").code, 0);
  std::string shards;
  for (int i = 1; i <= 3; ++i) {
    const std::string out = tmp("shard-" + std::to_string(i) + ".csv");
    const CliRun r = qmvlab("sweep " + exp + " --shard " + std::to_string(i) + "/3 --out " + out + " --peak-reps 1 --peak-buffer-mib 64");
    ASSERT_EQ(r.code, 0) << r.output;
    shards += " " + out;
  }
  const std::string merged = tmp("shard-merged.csv");
  const CliRun m = qmvlab("merge " + merged + shards);
  ASSERT_EQ(m.code, 0) << m.output;
  const qmv::CsvTable t = qmv::read_sweep_csv(merged);
  ASSERT_EQ(t.rows.size(), 9u);
  EXPECT_EQ(keys_of(t).size(), 9u);
  for (std::size_t i = 1; i < t.rows.size(); ++i) {
    const auto& a = t.rows[i - 1];
    const auto& b = t.rows[i];
    EXPECT_LE(a[t.column("kernel")], b[t.column("kernel")]);
  }
  // Merging a shard with itself drops the repeats, with a warning.
  const CliRun dup = qmvlab("merge " + tmp("dup.csv") + " " + tmp("shard-1.csv") + " " + tmp("shard-1.csv"));
  ASSERT_EQ(dup.code, 0) << dup.output;
  EXPECT_NE(dup.output.find("warning: duplicate point"), std::string::npos) << dup.output;
  std::ofstream(tmp("not-sweep.csv")) << "a,b\n1,2\n";
  expect_error("merge " + tmp("bad.csv") + " " + tmp("shard-1.csv") + " " + tmp("not-sweep.csv"),
               "not-sweep.csv: not a sweep CSV");
}

// Outside Slurm the Slurm columns are empty. A file from before them resumes: its rows
// are written again under the current header, as they were, and the points run now (in
// an array task) name the job, the task and the node.
TEST(SweepCli, OlderFilesResumeAndRowsNameTheSlurmJob) {
  const std::string exp = write_experiment("slurm.toml", "check = false\n");
  const std::string full = tmp("slurm-full.csv"), part = tmp("slurm-part.csv");
  {
    const qmv::testing::ScopedEnv env(qmv::testing::no_slurm_job());
    const CliRun r = qmvlab("sweep " + exp + " --out " + full + " --peak-reps 1 --peak-buffer-mib 64");
    ASSERT_EQ(r.code, 0) << r.output;
  }
  const qmv::CsvTable all = qmv::read_sweep_csv(full);
  for (const auto& row : all.rows)
    for (const char* c : {"slurm_job_id", "slurm_array_task_id", "slurm_node"}) EXPECT_EQ(row[all.column(c)], "");
  // The first four rows as a qmvlab from before the Slurm columns wrote them.
  const std::vector<std::string> older = qmv::legacy_sweep_headers()[1];
  const std::size_t kept = 4;
  ASSERT_GT(all.rows.size(), kept);
  {
    qmv::CsvWriter w(part, older, false);
    for (std::size_t i = 0; i < kept; ++i) {
      std::vector<std::string> f;
      for (const auto& c : older) f.push_back(all.rows[i][all.column(c)]);
      w.write(f);
    }
  }
  ASSERT_TRUE(qmv::read_sweep_csv(part).older_header);
  {
    const qmv::testing::ScopedEnv env({{"SLURM_JOB_ID", "557"}, {"SLURM_ARRAY_JOB_ID", "555"},
                                       {"SLURM_ARRAY_TASK_ID", "2"}, {"SLURMD_NODENAME", "node-a100-1"}});
    const CliRun r = qmvlab("sweep " + exp + " --out " + part + " --resume --peak-reps 1 --peak-buffer-mib 64");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("rewriting its rows with the current columns"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(std::to_string(kept) + " already in the CSV"), std::string::npos) << r.output;
  }
  std::ifstream in(part);
  std::string first;
  std::getline(in, first);
  std::string want;
  for (const auto& c : qmv::sweep_header()) want += (want.empty() ? "" : ",") + c;
  EXPECT_EQ(first, want);
  const qmv::CsvTable after = qmv::read_sweep_csv(part);
  EXPECT_FALSE(after.older_header);
  ASSERT_EQ(after.rows.size(), all.rows.size());
  EXPECT_EQ(keys_of(after), keys_of(all));
  for (std::size_t i = 0; i < after.rows.size(); ++i) {
    const auto& row = after.rows[i];
    if (i < kept) {
      // As written, but for the n column the older file lacked (empty: one vector).
      std::vector<std::string> as_written = all.rows[i];
      as_written[all.column("n")] = "";
      EXPECT_EQ(row, as_written) << "row " << i << " changed";
      continue;
    }
    EXPECT_EQ(row[after.column("slurm_job_id")], "555");
    EXPECT_EQ(row[after.column("slurm_array_task_id")], "2");
    EXPECT_EQ(row[after.column("slurm_node")], "node-a100-1");
  }
}

// The committed results still resume: every sweep CSV under results/ reads, and a dry
// run of --resume on a copy counts its rows as done.
TEST(SweepCli, CommittedSweepResultsStillResume) {
  int files = 0;
  for (const auto& dir : std::filesystem::directory_iterator(std::string(QMV_SOURCE_DIR) + "/results")) {
    const std::filesystem::path csv = dir.path() / "default.csv";
    if (!std::filesystem::exists(csv) || qmv::detect_csv_kind(csv.string()) != qmv::CsvKind::Sweep) continue;
    ++files;
    const qmv::CsvTable t = qmv::read_sweep_csv(csv.string());
    ASSERT_FALSE(t.rows.empty()) << csv;
    const std::string copy = tmp("committed-" + dir.path().filename().string() + ".csv");
    std::filesystem::copy_file(csv, copy, std::filesystem::copy_options::overwrite_existing);
    const CliRun r = qmvlab(std::string("sweep ") + QMV_SOURCE_DIR + "/experiments/default.toml --out " + copy +
                            " --resume --dry-run");
    ASSERT_EQ(r.code, 0) << csv << "\n" << r.output;
    EXPECT_NE(r.output.find(" already in the CSV"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find(", 0 already in the CSV"), std::string::npos) << csv << ": no row counted\n" << r.output;
  }
  EXPECT_GT(files, 0) << "no results/*/default.csv";
}

TEST(SweepCli, BadInputIsOneClearLine) {
  expect_error("sweep " + tmp("missing.toml"), "missing.toml: no such file");
  const std::string bad = tmp("bad.toml");
  std::ofstream(bad) << "name = \"b\"\nkernels = [\"*\"]\nshapes = [\"1x256\"]\nthreads = [-2]\n";
  expect_error("sweep " + bad, "bad.toml:4: key 'threads'");
  const std::string exp = write_experiment("shardbad.toml");
  expect_error("sweep " + exp + " --shard 4/3", "bad shard '4/3'");
  const CliRun shapes = qmvlab("list --shapes");
  EXPECT_EQ(shapes.code, 0);
  EXPECT_NE(shapes.output.find("14336x4096[ffn_gate,ffn_up]"), std::string::npos) << shapes.output;
}

// merge refuses a value no sweep writes, in a column it knows, naming the file, the line
// and the column, and leaves the file it would have written as it was.
TEST(SweepCli, MergeRefusesUnknownValuesAndKeepsItsOutput) {
  const std::string files = std::string(QMV_SOURCE_DIR) + "/tests/bad_input/files/";
  const std::string good = files + "sweep_a.csv";
  const std::string out = tmp("merge-kept.csv");
  std::filesystem::copy_file(files + "sweep_b.csv", out, std::filesystem::copy_options::overwrite_existing);
  auto text = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string kept = text(out);
  const qmv::CsvTable table = qmv::read_sweep_csv(good);
  ASSERT_FALSE(table.rows.empty());
  for (const auto& [column, value, why] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"status", "bogus", "is not a sweep status (ok, failed, skipped)"},
           {"status", "OK", "is not a sweep status"},
           {"rows", "-1", "is negative"},
           {"gbps_median", "nan", "is not a finite number"},
           {"peak_pct", "-inf", "is negative"},
           {"time_median_us", "", "is not a time on an ok row"},
           {"cache", "tepid", "is not a cache state (cold, warm)"},
           {"check_passed", "yes", "is not 0, 1 or empty"},
           {"act_quant", "later", "is not none, before, in_call or empty"},
       }) {
    qmv::CsvTable bad = table;
    bad.rows[0][bad.column(column)] = value;
    const std::string path = tmp("merge-bad.csv");
    {
      qmv::CsvWriter w(path, bad.header, false);
      for (const auto& r : bad.rows) w.write(r);
    }
    expect_error("merge " + out + " " + good + " " + path,
                 "merge-bad.csv: line 2: column " + column + ": '" + value + "' " + why);
    EXPECT_EQ(text(out), kept) << column << " " << value << ": the output changed";
  }
}

TEST(SweepCli, ShippedExperimentsParse) {
  for (const char* e : {"default", "ci"}) {
    const CliRun r = qmvlab(std::string("sweep ") + QMV_SOURCE_DIR + "/experiments/" + e + ".toml --dry-run --out " +
                            tmp(std::string(e) + "-dry.csv"));
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find(" run\n"), std::string::npos) << e;
  }
}

}  // namespace
