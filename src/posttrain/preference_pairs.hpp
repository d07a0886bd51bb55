// Preference pairs for DPO (issue 18, item 5): a prompt (a user message, or a conversation that
// ends with a user message) and two assistant replies, the chosen and the rejected. From a JSON
// Lines file:
//   {"prompt": "What is 2 + 2?", "chosen": "4", "rejected": "5"}
//   {"prompt": [{"role": "user", "content": ...}, ...], "chosen": ..., "rejected": ...}
// Errors name FILE:LINE and the key; other keys (an id, a source) are ignored.
#pragma once

#include <string>
#include <vector>

#include "data/chat_format.hpp"

namespace nanogpt {

struct PreferencePair {
  Conversation prompt;  // ends with a user message
  std::string chosen, rejected;
};

std::vector<PreferencePair> read_preference_pairs(const std::string& path);
// One per line, atomically; read_preference_pairs gives them back.
void write_preference_pairs(const std::string& path, const std::vector<PreferencePair>& pairs);

// The prompt followed by `reply` as the assistant's turn: what the pair's two sequences are.
Conversation with_reply(const Conversation& prompt, const std::string& reply);

}  // namespace nanogpt
