// A stand-in for Worker when the site is opened from disk (file://), where browsers refuse to
// start a Worker from a script file: the search then runs its worker script in a hidden
// iframe of the page, and messages pass between them as they would with a Worker (later,
// never during the call, and as copies). Over http(s) nothing changes.
(function () {
  "use strict";
  if (location.protocol !== "file:") {
    return;
  }

  function copy(data) {
    return typeof structuredClone === "function" ? structuredClone(data) : JSON.parse(JSON.stringify(data));
  }

  function loadScript(frame, url) {
    return new Promise(function (resolve, reject) {
      var script = frame.contentDocument.createElement("script");
      script.src = url;
      script.onload = function () { resolve(); };
      script.onerror = function () { reject(new Error("cannot load " + url)); };
      frame.contentDocument.head.appendChild(script);
    });
  }

  class FileWorker extends EventTarget {
    constructor(url) {
      super();
      var worker = this;
      this.onmessage = null;
      this.frame = document.createElement("iframe");
      this.frame.style.display = "none";
      document.documentElement.appendChild(this.frame);
      var scope = this.frame.contentWindow;
      // The worker's side: what it posts reaches this object's listeners.
      scope.postMessage = function (data) {
        setTimeout(function () {
          var event = new MessageEvent("message", { data: copy(data) });
          worker.dispatchEvent(event);
          if (typeof worker.onmessage === "function") {
            worker.onmessage(event);
          }
        });
      };
      // importScripts, in order; the search awaits what it returns.
      scope.importScripts = function () {
        var urls = Array.prototype.slice.call(arguments);
        return urls.reduce(function (loaded, next) {
          return loaded.then(function () { return loadScript(worker.frame, next); });
        }, Promise.resolve());
      };
      this.pending = [];
      this.ready = loadScript(this.frame, new URL(url, location.href).href).then(function () {
        var pending = worker.pending;
        worker.pending = null;
        pending.forEach(function (data) { worker.deliver(data); });
      });
    }

    deliver(data) {
      var scope = this.frame.contentWindow;
      var frame = this.frame;
      setTimeout(function () {
        scope.dispatchEvent(new scope.MessageEvent("message", { data: copy(data) }));
      });
      return frame;
    }

    postMessage(data) {
      if (this.pending !== null) {
        this.pending.push(data);
      } else {
        this.deliver(data);
      }
    }

    terminate() {
      this.frame.remove();
    }
  }

  window.Worker = FileWorker;
})();
