// The chat page: post a message to the JSON chat route and render the streamed reply.
// Text goes into the page with textContent only, never as HTML.
"use strict";

(function () {
  const form = document.getElementById("chat-form");
  if (!form) return;
  const log = document.getElementById("chat-log");
  const input = document.getElementById("message");
  const send = document.getElementById("send");
  const status = document.getElementById("chat-status");
  const errorBox = document.getElementById("chat-error");
  const details = document.getElementById("turn-details");
  const toolCalls = document.getElementById("tool-calls");
  const recalled = document.getElementById("recalled");
  const memoryBlock = document.getElementById("memory-block");

  function bubble(role, text) {
    const item = document.createElement("li");
    item.className = "message " + role;
    const head = document.createElement("p");
    head.className = "message-head";
    const who = document.createElement("strong");
    who.textContent = role;
    head.appendChild(who);
    const body = document.createElement("div");
    body.className = "message-content";
    body.textContent = text;
    item.append(head, body);
    log.appendChild(item);
    return body;
  }

  function showError(text) {
    errorBox.textContent = text;
    errorBox.hidden = false;
  }

  function readable(status, body) {
    const message = body && body.message ? body.message : "the server answered " + status;
    if (status === 503) return message.charAt(0).toUpperCase() + message.slice(1);
    if (status === 502) return "The model failed, so there is no reply. " + message;
    if (status === 401) return "Your login has expired; reload the page to log in again.";
    if (status === 422) return "The message was refused: " + message;
    return "The turn failed: " + message;
  }

  function showDetails(done) {
    toolCalls.replaceChildren();
    for (const call of done.tool_calls || []) {
      const li = document.createElement("li");
      // remember's answer says what it stored (or why not): show it, not only "ok".
      li.textContent = call.result ? call.name + ": " + call.result : call.name + " (" + call.outcome + ")";
      toolCalls.appendChild(li);
    }
    if (!toolCalls.children.length) {
      const li = document.createElement("li");
      li.textContent = "none";
      toolCalls.appendChild(li);
    }
    recalled.replaceChildren();
    for (const r of done.recalled || []) {
      const li = document.createElement("li");
      li.className = "memory " + r.memory.kind;
      const p = document.createElement("p");
      p.className = "content";
      const a = document.createElement("a");
      a.href = "/memories/" + encodeURIComponent(r.memory.id);
      a.textContent = r.memory.content;
      p.appendChild(a);
      const score = document.createElement("p");
      score.className = "hint";
      score.textContent = r.memory.kind + " · score " + Number(r.score).toFixed(4);
      li.append(p, score);
      recalled.appendChild(li);
    }
    if (!recalled.children.length) {
      const li = document.createElement("li");
      li.textContent = "none";
      recalled.appendChild(li);
    }
    memoryBlock.textContent = done.memory_block || "(empty)";
    details.hidden = false;
  }

  // Server-sent events from a fetch body: "event: NAME\ndata: JSON\n\n" blocks.
  function parseBlock(block) {
    let name = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith("event:")) name = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    }
    return { name: name, data: data.length ? JSON.parse(data.join("\n")) : null };
  }

  async function turn(text) {
    errorBox.hidden = true;
    errorBox.textContent = "";
    bubble("user", text);
    const reply = bubble("assistant", "");
    reply.parentElement.classList.add("streaming");
    reply.parentElement.setAttribute("aria-busy", "true");
    status.textContent = "The assistant is answering…";
    let finished = false;
    try {
      const response = await fetch(form.dataset.endpoint, {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
        body: JSON.stringify({ message: text }),
        credentials: "same-origin",
      });
      const type = response.headers.get("content-type") || "";
      if (!response.ok || !type.startsWith("text/event-stream")) {
        let body = null;
        try { body = await response.json(); } catch (e) { body = null; }
        showError(readable(response.status, body));
        reply.parentElement.remove();
        return;
      }
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const event = parseBlock(buffer.slice(0, cut));
          buffer = buffer.slice(cut + 2);
          if (event.name === "delta" && event.data) {
            reply.textContent += event.data.text;
          } else if (event.name === "done" && event.data) {
            reply.textContent = event.data.reply;
            showDetails(event.data);
            finished = true;
          } else if (event.name === "error" && event.data) {
            const code = event.data.error === "model_failed" ? 502 : 500;
            showError(readable(code, event.data));
            finished = true;
          }
        }
      }
      if (!finished) showError("The connection ended before the reply was complete; reload the page to see what was stored.");
    } catch (e) {
      showError("The server could not be reached: " + e.message);
    } finally {
      reply.parentElement.classList.remove("streaming");
      reply.parentElement.removeAttribute("aria-busy");
      // A reply that never got a word (an error before any text) leaves no empty bubble.
      if (!reply.textContent && reply.parentElement.isConnected) reply.parentElement.remove();
      status.textContent = finished && errorBox.hidden ? "Reply complete." : "";
    }
  }

  form.addEventListener("submit", async function (event) {
    event.preventDefault();
    const text = input.value;
    if (!text.trim()) {
      showError("Type a message first.");
      input.focus();
      return;
    }
    send.disabled = true;
    input.value = "";
    try {
      await turn(text);
    } finally {
      send.disabled = false;
      input.focus();
    }
  });

  input.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      // Not while a turn runs, nor on a server without a model (the button says why).
      if (!send.disabled) form.requestSubmit();
    }
  });
})();
