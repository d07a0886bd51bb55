// `nanogpt sft`: supervised fine-tuning of a pre-trained checkpoint on conversations (issue 18,
// item 4), as nanochat's chat_sft does it: conversations rendered in the chat format with a
// loss on the assistant's tokens only, packed into rows by best fit without cropping
// (row_packing.hpp), Muon + Adam at a fraction of the pre-training rates, their state carried
// over from the pre-training checkpoint when it has one, and the same checkpoints, exact
// resume, metrics and clean Ctrl-C as `nanogpt train`.
//
// A step takes rows_per_step rows of an epoch's order (a permutation of the rows by (seed,
// epoch)), runs them through forward_backward in micro-batches with each target weighted by its
// loss mask, and scales the gradient by 1 / (the step's loss tokens): the step's mean loss over
// the assistant tokens, whatever the micro-batching.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "posttrain/chat_eval.hpp"
#include "runtime/comm.hpp"

namespace nanogpt {

struct SftOptions {
  std::string checkpoint;           // the pre-trained checkpoint, or a run directory (its newest)
  std::string tokenizer;            // the tokenizer's spec file
  nlohmann::json tokenizer_record;  // what the checkpoint's meta.json records of it (copied on)
  // Conversations: a JSON Lines file, or a task mixture (task_conversations.hpp) whose train
  // problems become conversations, examples_per_cell of each cell.
  std::string data;
  std::string tasks;
  int64_t examples_per_cell = 1000;
  std::string run_dir;
  bool resume = false;
  int64_t max_steps = 0;  // stop (with a checkpoint) after this many steps of this invocation
  int64_t epochs = 1;
  int64_t rows_per_step = 4;
  int64_t seq_len = 0;         // tokens a row feeds the model; 0: the checkpoint's train_seq_len
  double lr_scale = 0.1;       // of every pre-training learning rate
  double cooldown_frac = 1.0;  // the LR schedule over the SFT steps (1: falls from the start)
  uint64_t seed = 0;
  int64_t window_blocks = 0;     // attention window; 0: what pre-training ended with
  int64_t checkpoint_every = 0;  // 0: at the end only
  // Held-out evaluation of the task mixture's test problems (tasks only): before training,
  // every eval_every steps (0: never in between) and at the end.
  int64_t eval_every = 0;
  ChatEvalOptions eval;
  bool evaluate = true;
  std::string command_line;
  bool live_line = true;
  // The ranks that train together (posttrain/stage_ranks.hpp); null: the job's world, so under
  // mpirun every rank takes a slice of each step's rows.
  Comm* comm = nullptr;
};

struct SftResult {
  int64_t steps = 0;      // the run's total
  int64_t steps_run = 0;  // by this invocation
  double last_loss = 0;   // the last step's mean loss over assistant tokens
  bool interrupted = false;
  std::string last_checkpoint;
  int64_t conversations = 0, rows = 0, loss_tokens = 0;
  bool evaluated = false;
  ChatEvalResult before, after;
};

SftResult run_sft(const SftOptions& options);

}  // namespace nanogpt
