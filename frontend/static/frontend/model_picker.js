// The model picker of the deploy form: every model field (the model, the draft model, each
// adapter's) suggests the models the fleet's nodes hold (model-store names, hub repositories
// they have staged) and the forms a model may take (hf://, modelscope://, oss://, obs://,
// s3://); the hub token field shows once a model is on a hub.
"use strict";

const ModelPicker = (() => {
  const {api, el} = Wharf;
  const HUB = /^(hf|modelscope):\/\//;
  const CACHE_KEY = /-[0-9a-f]{16}$/; // a staged object-storage source: not a name to give
  const FORMS = [
    ["hf://", "Hugging Face: hf://org/name or hf://org/name@revision"],
    ["modelscope://", "ModelScope: modelscope://org/name or modelscope://org/name@revision"],
    ["oss://", "Alibaba Cloud OSS: oss://bucket/prefix/"],
    ["obs://", "Huawei Cloud OBS: obs://bucket/prefix/"],
    ["s3://", "S3: s3://bucket/prefix/"],
  ];
  const isModelInput = (input) => /(^|\.)model$/.test(input.name || "");

  // The nodes' models, where this user may list nodes; else only the forms.
  async function held() {
    const result = await api("GET", "/nodes");
    if (!result.ok || !Array.isArray(result.data)) return [];
    const names = new Set(result.data.flatMap((node) => node.cached_models || []));
    return [...names].filter((name) => !CACHE_KEY.test(name)).sort();
  }

  async function attach(form) {
    const list = el("datalist", {id: "model-choices"},
      FORMS.map(([value, label]) => el("option", {value}, label)));
    form.append(list);
    const token = form.querySelector('[data-field="llm.hub_token"]');
    const onHub = () => [...form.querySelectorAll("input")]
      .some((input) => isModelInput(input) && HUB.test(input.value.trim()));
    const update = () => {
      for (const input of form.querySelectorAll("input")) {
        if (isModelInput(input)) input.setAttribute("list", list.id);
      }
      if (token) token.hidden = !onHub();
    };
    form.addEventListener("input", update);
    form.addEventListener("focusin", update); // an adapter row added since
    update();
    const names = await held();
    list.prepend(...names.map((name) => el("option", {value: name},
      HUB.test(name) ? "staged on a node" : "in a node's model store")));
  }

  return {attach};
})();
