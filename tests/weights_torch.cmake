# GPT-2 and LLaMA weights from PyTorch models into tapegrad and back
# (tests/weights_torch.sh runs scripts/weights_torch.py, compare only).
# Skipped, saying why, where no python3 has PyTorch; test_gpt_weights
# checks the C side against the script's fixture without it.
add_test(NAME weights_torch
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/weights_torch.sh $<TARGET_FILE:test_gpt_weights>)
set_tests_properties(weights_torch PROPERTIES
  SKIP_RETURN_CODE 77
  ENVIRONMENT_MODIFICATION "${TG_TEST_ENV}"
  TIMEOUT 600)
