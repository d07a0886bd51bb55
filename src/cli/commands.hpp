// Each subcommand lives in its own file and registers itself on the root CLI::App.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>

namespace nanogpt::cli {

void register_tokenizer(CLI::App& app);
void register_encode(CLI::App& app);
void register_decode(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_bench(CLI::App& app);
void register_bench_comm(CLI::App& bench);     // cmd_bench_comm.cpp, under `bench`
void register_bench_rollout(CLI::App& bench);  // cmd_bench_rollout.cpp, under `bench`
void register_info(CLI::App& app);
void register_train(CLI::App& app);
void register_eval(CLI::App& app);
void register_sample(CLI::App& app);
void register_leaderboard(CLI::App& app);
void register_prepare(CLI::App& app);
void register_speedrun(CLI::App& app);
void register_evals(CLI::App& app);  // cmd_evals.cpp
void register_plot(CLI::App& app);
void register_sft(CLI::App& app);   // cmd_sft.cpp
void register_rl(CLI::App& app);    // cmd_rl.cpp
void register_dpo(CLI::App& app);   // cmd_dpo.cpp
void register_chat(CLI::App& app);  // cmd_chat.cpp

// `--window N` of the commands that run a checkpoint (eval, sample, evals run, leaderboard
// submit --checkpoint): the long layers' attention window in blocks; 0 (unset) means the window
// training ended with.
inline void add_checkpoint_window_option(CLI::App* cmd, int64_t& window) {
  cmd->add_option("--window", window,
                  "Attention window of the long layers in blocks of block_size tokens (default: "
                  "the window training ended with)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
}

}  // namespace nanogpt::cli
