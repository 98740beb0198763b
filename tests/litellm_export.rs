//! The LiteLLM export is deployable as written: each export is loaded into a
//! real LiteLLM `Router` (from `ROUTEVAL_TEST_PYTHON`, a Python with
//! `litellm`, `pyyaml` and `scipy`, which `.ci/run` sets up) and a mock completion is
//! routed through every model name and every fallback chain.

use std::path::Path;

use crate::common::loads_into_litellm;

#[test]
fn the_example_export_routes_every_model_and_fallback_in_litellm() {
    let (_workspace, config) = crate::common::deployed();
    let export = Path::new(&config).with_file_name("route-config.v1.litellm.yaml");
    let text = std::fs::read_to_string(&export).unwrap();
    assert!(text.contains("api_base: \"https://example-eu.openai.azure.com/openai/v1\""));
    assert!(text.contains("api_key: \"os.environ/OPENAI_API_KEY\""));
    assert!(!text.contains("sk-"), "a key in the export");
    loads_into_litellm(&export);
}
