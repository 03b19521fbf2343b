# Tests against the pinned llama.cpp build (scripts/install-peers.sh) and on the real
# model's Q4_K_M requant that scripts/get-model.sh makes with it. Each skips with one
# line (exit 77) when what it needs is not there. Included by tests/CMakeLists.txt.
if(NOT DEFINED QMV_PEER_DIR)
  set(QMV_PEER_DIR "${CMAKE_SOURCE_DIR}/.peers/llama.cpp")
endif()
set(qmv_llama_bench "${QMV_PEER_DIR}/build/bin/llama-bench")
set(qmv_q4_K_M_model "${CMAKE_SOURCE_DIR}/models/SmolLM2-135M-Instruct.Q4_K_M.gguf")

# Every architecture and weight mix `qmvlab make-model` writes loads and generates
# tokens in llama.cpp (toy-sized models, so it stays fast).
add_test(NAME make_model_llamacpp
  COMMAND ${QMV_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/make_model_llamacpp_test.py --qmvlab $<TARGET_FILE:qmvlab>
          --llama-bench ${qmv_llama_bench})
set_tests_properties(make_model_llamacpp PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)

# scripts/compare_llamacpp.py (llama-bench against qmvlab decode) on a toy model: its CSV row holds what the
# two tools reported, and each error is one line with its own exit status.
add_test(NAME compare_llamacpp_script
  COMMAND ${QMV_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/compare_llamacpp_test.py --qmvlab $<TARGET_FILE:qmvlab>
          --llama-bench ${qmv_llama_bench} --script ${CMAKE_SOURCE_DIR}/scripts/compare_llamacpp.py)
set_tests_properties(compare_llamacpp_script PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)

# scripts/compare_llamacpp_batch.py (llama-batched-bench against qmvlab decode --batch) on
# a toy model: its rows hold what the two reported, and each error is one line.
add_test(NAME compare_llamacpp_batch_script
  COMMAND ${QMV_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/compare_llamacpp_batch_test.py --qmvlab $<TARGET_FILE:qmvlab>
          --script ${CMAKE_SOURCE_DIR}/scripts/compare_llamacpp_batch.py
          --batched-bench ${QMV_PEER_DIR}/build/bin/llama-batched-bench)
set_tests_properties(compare_llamacpp_batch_script PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)

# The requant through the float64 reference: " Paris" and a language model's NLL.
add_test(NAME reference_forward_real_model_q4_K_M
  COMMAND ${QMV_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/reference_forward_test.py --real-model ${qmv_q4_K_M_model})
set_tests_properties(reference_forward_real_model_q4_K_M PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600
  DEPENDS real_model_gguf)
# Greedy decode on the requant against llama.cpp's recorded one, with f32-activation
# kernels (K-quant, Q5_0 and Q8_0 weights), as llamacpp_golden does on the Q4_1 model.
add_test(NAME llamacpp_golden_q4_K_M
  COMMAND ${QMV_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/llamacpp_golden_test.py --qmvlab $<TARGET_FILE:qmvlab>
          --model ${qmv_q4_K_M_model}
          --golden ${CMAKE_CURRENT_SOURCE_DIR}/data/llamacpp_smollm2_q4_K_M_greedy.json --threads 1
          --plan q4_K=q4_K.cpu.avx2_f32,q6_K=q6_K.cpu.avx2_f32,q5_0=q5_0.cpu.avx2_f32,q8_0=q8_0.cpu.avx2_f32)
set_tests_properties(llamacpp_golden_q4_K_M PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600 DEPENDS real_model_gguf)
# qmvlab's logits on the requant against the float64 reference, with f32-activation and
# with the default (int8-activation) kernels, Q4_K and Q6_K among them; " Paris".
add_test(NAME requant_peer_decode
  COMMAND ${QMV_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/requant_peer_decode_test.py --qmvlab $<TARGET_FILE:qmvlab>
          --model ${qmv_q4_K_M_model})
set_tests_properties(requant_peer_decode PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600 DEPENDS real_model_gguf)
