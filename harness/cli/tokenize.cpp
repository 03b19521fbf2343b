// `qmvlab tokenize`: a model's tokenizer on a text, the ids and then each piece.
#include <fmt/format.h>

#include "harness/cli/command.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace qmv {
namespace {

class TokenizeCommand : public Command {
 public:
  explicit TokenizeCommand(CLI::App& app) {
    cmd_ = app.add_subcommand("tokenize", "Tokenize text with a model's tokenizer: ids, then the pieces");
    cmd_->add_option("--model", model_, "GGUF model")->required();
    cmd_->add_option("text", text_, "Text to tokenize")->required();
    cmd_->add_flag("--bos", bos_, "Start with the BOS token");
    cmd_->add_flag("--ids", ids_only_, "Print only the ids, space separated");
  }

  bool chosen() const override { return cmd_->parsed(); }

  int run(const std::string&) override {
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
  std::string model_, text_;
  bool bos_ = false, ids_only_ = false;
};

}  // namespace

std::unique_ptr<Command> tokenize_command(CLI::App& app) { return std::make_unique<TokenizeCommand>(app); }

}  // namespace qmv
