/* torchgraphrec notebook widget (anywidget ESM). The layout engine and the report's own
   functions are asked of the kernel once per page and shared by every report on it; each
   report asks for its own data. Both come as custom messages, which a saved notebook does
   not keep: it keeps the SVG beside the widget for renderers without JavaScript. */

function tgrAsk(model, what) {
  return new Promise((resolve, reject) => {
    const answered = (message, buffers) => {
      if (!message || message.answer !== what) return;
      model.off("msg:custom", answered);
      if (message.error) reject(new Error(message.error));
      else resolve(new TextDecoder().decode(buffers[0]));
    };
    model.on("msg:custom", answered);
    model.send({ask: what});
  });
}

function tgrEngine(model) {
  if (!globalThis.__tgrEngine) {
    globalThis.__tgrEngine = tgrAsk(model, "engine").then((text) => {
      const script = document.createElement("script");
      script.textContent = text;  // classic script: defines Viz and tgrReport globally
      document.head.appendChild(script);
      globalThis.__tgrEngineLoads = (globalThis.__tgrEngineLoads || 0) + 1;
    });
    globalThis.__tgrEngine.catch(() => { globalThis.__tgrEngine = null; });
  }
  return globalThis.__tgrEngine;
}

async function render({model, el}) {
  el.classList.add("tgr-widget");
  const note = document.createElement("p");
  note.textContent = `Loading the torchgraphrec report of ${model.get("model")}…`;
  el.replaceChildren(note);
  try {
    const [, fragment] = await Promise.all([tgrEngine(model), tgrAsk(model, "report")]);
    el.innerHTML = fragment;  // written by the report's template, every text escaped
    globalThis.tgrReport(el.querySelector(".tgr-report"));
  } catch (error) {
    note.textContent = `The torchgraphrec report needs its kernel (run the cell again): ${error.message}`;
  }
}

export default {render};
