// `qmvlab tokenize`: a model's tokenizer on a text, the ids and then each piece.
#include <fmt/format.h>

#include <stdexcept>

#include "harness/cli/command.h"
#include "harness/cli/options.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace qmv {
namespace {

class TokenizeCommand : public Command {
 public:
  explicit TokenizeCommand(CLI::App& app) {
    cmd_ = app.add_subcommand("tokenize", "Tokenize text with a model's tokenizer: ids, then the pieces");
    cmd_->add_option("--model", model_, "GGUF model")->required();
    auto* text = cmd_->add_option("text", text_, "Text to tokenize");
    cmd_->add_option("--prompt-file", prompt_file_, "Tokenize this file's text instead (-: standard input)")
        ->excludes(text);
    cmd_->add_flag("--bos", bos_, "Start with the BOS token");
    cmd_->add_flag("--ids", ids_only_, "Print only the ids, space separated");
  }

  bool chosen() const override { return cmd_->parsed(); }

  int run(const std::string&) override {
    if (!prompt_file_.empty()) text_ = read_prompt_file(prompt_file_);
    else if (!cmd_->get_option("text")->count())
      throw std::invalid_argument("tokenize: give the text, or --prompt-file PATH");
    check_utf8(text_, prompt_file_.empty() ? "tokenize: the text" : "--prompt-file " + prompt_file_);
    const gguf::File f = gguf::File::open(model_);
    const Tokenizer t = Tokenizer::from_gguf(f);
    const std::vector<int> ids = t.encode(text_, bos_);
    std::string line;
    for (int id : ids) line += (line.empty() ? "" : " ") + std::to_string(id);
    fmt::print("{}\n", line);
    if (ids_only_) return 0;
    for (int id : ids) fmt::print("{:>7} {:?}\n", id, t.decode(id));
    if (t.decode(ids) != std::string(bos_ && t.bos() >= 0 ? t.decode(t.bos()) : "") + text_)
      fmt::print("note: decoding does not give the text back\n");
    return 0;
  }

 private:
  CLI::App* cmd_ = nullptr;
  std::string model_, text_, prompt_file_;
  bool bos_ = false, ids_only_ = false;
};

}  // namespace

std::unique_ptr<Command> tokenize_command(CLI::App& app) { return std::make_unique<TokenizeCommand>(app); }

}  // namespace qmv
