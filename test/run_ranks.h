// Test helper: starts this test binary again as the ranks of a
// data-parallel run over loopback, each running one rank-side test.
#pragma once

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "free_port.h"

extern char** environ;

namespace ltb {

// Starts this test binary as `world` ranks over Gloo on loopback, each
// running the rank-side test `filter` with `extra` environment; returns
// whether every rank exited with 0.
inline bool RunRanks(const std::string& filter, const std::vector<std::string>& extra,
                     int world = 2) {
  const int port = FreePort();
  std::vector<pid_t> children;
  for (int rank = 0; rank < world; ++rank) {
    std::vector<std::string> env = {
        "RANK=" + std::to_string(rank),        "WORLD_SIZE=" + std::to_string(world),
        "LOCAL_RANK=" + std::to_string(rank),  "MASTER_ADDR=127.0.0.1",
        "MASTER_PORT=" + std::to_string(port), "OMP_NUM_THREADS=1"};
    for (const std::string& e : extra)
      env.push_back(absl::StrReplaceAll(e, {{"%r", std::to_string(rank)}}));
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
    std::string flag = "--gtest_filter=" + filter;
    char* argv[] = {exe.data(), flag.data(), nullptr};
    pid_t pid = 0;
    if (::posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, envp.data()) != 0) {
      ADD_FAILURE() << "cannot start rank " << rank;
      break;
    }
    children.push_back(pid);
  }
  bool ok = static_cast<int>(children.size()) == world;
  for (pid_t pid : children) {
    int status = 0;
    const bool exited = ::waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
                        WEXITSTATUS(status) == 0;
    ok = ok && exited;
  }
  return ok;
}

}  // namespace ltb
