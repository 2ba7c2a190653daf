/** Request/reply over anywidget custom messages, matched by request_id. */
import type { AnyModel } from '@anywidget/types';
import type {
  DetailReply,
  DotReply,
  ErrorReply,
  GraphvizReply,
  HtmlReply,
  InspectReply,
  ModuleDetail,
  ModuleReply,
  NodeDetail,
  StepReply,
  StorageReply,
  TryReply,
  ValuesReply
} from './model/wire';

/** Each request type and the reply it gets (an ErrorReply rejects instead). */
export interface ReplyByType {
  inspect: InspectReply;
  module: ModuleReply;
  dot: DotReply;
  graphviz: GraphvizReply;
  values: ValuesReply;
  storage: StorageReply;
  try: TryReply;
  html: HtmlReply;
  detail: DetailReply;
  step: StepReply;
}
export type RequestType = keyof ReplyByType;

type Reply = ReplyByType[RequestType] | ErrorReply;

interface Pending {
  resolve: (v: { msg: Reply; buffers: DataView[] }) => void;
  reject: (e: Error) => void;
  timer: ReturnType<typeof setTimeout>;
  type: string;
}

export const DEFAULT_TIMEOUT_MS = 30_000;

/** Request ids are unique per page, so replies can never cross between widgets. */
let nextId = 1 + Math.floor(Math.random() * 1e6);

/** Requests to the kernel, each answered by the reply with its request_id (every view's). */
export interface Requests {
  request<K extends RequestType>(type: K, extra?: Record<string, unknown>, timeoutMs?: number): Promise<{ msg: ReplyByType[K]; buffers: DataView[] }>;
  /** Stop listening; pending requests reject with "view closed". */
  dispose(): void;
}

/** The requests and the graph view's by name. */
export interface Transport extends Requests {
  inspect(node: number): Promise<NodeDetail>;
  /** What the inspector shows for one Module (``ModuleRequest`` with its id, e.g. "model.h.0"). */
  module(id: string): Promise<ModuleDetail>;
  dot(): Promise<string>;
  /** The Graphviz ESM source bytes the kernel sends in buffers[0]. */
  graphvizSource(): Promise<ArrayBuffer>;
}

export function toArrayBuffer(buf: DataView | ArrayBuffer | ArrayBufferView): ArrayBuffer {
  if (buf instanceof ArrayBuffer) {
    return buf;
  }
  const view = buf as ArrayBufferView;
  return view.buffer.slice(view.byteOffset, view.byteOffset + view.byteLength) as ArrayBuffer;
}

export function createRequests(model: AnyModel, timeoutMs = DEFAULT_TIMEOUT_MS): Requests {
  const pending = new Map<number, Pending>();

  const onMsg = (msg: unknown, buffers?: DataView[]) => {
    if (!msg || typeof msg !== 'object') {
      return;
    }
    const m = msg as Reply;
    const p = pending.get(m.request_id);
    if (!p) {
      return;
    }
    pending.delete(m.request_id);
    clearTimeout(p.timer);
    if (m.type === 'error') {
      p.reject(new Error(m.message || 'the kernel reported an error'));
    } else if (m.type !== p.type) {
      p.reject(new Error(`unexpected reply type "${m.type}" for a "${p.type}" request`));
    } else {
      p.resolve({ msg: m, buffers: buffers ?? [] });
    }
  };
  model.on('msg:custom', onMsg);

  const request: Requests['request'] = <K extends RequestType>(type: K, extra: Record<string, unknown> = {}, ms = timeoutMs) =>
    new Promise<{ msg: ReplyByType[K]; buffers: DataView[] }>((resolve, reject) => {
      const request_id = nextId++;
      const timer = setTimeout(() => {
        pending.delete(request_id);
        reject(
          new Error(
            `no reply from the kernel to "${type}" after ${Math.round(ms / 1000)} s (is the kernel busy or restarted?)`
          )
        );
      }, ms);
      pending.set(request_id, { resolve: resolve as Pending['resolve'], reject, timer, type });
      try {
        model.send({ type, request_id, ...extra });
      } catch (err) {
        clearTimeout(timer);
        pending.delete(request_id);
        reject(err instanceof Error ? err : new Error(String(err)));
      }
    });

  return {
    request,
    dispose() {
      model.off('msg:custom', onMsg);
      for (const [, p] of pending) {
        clearTimeout(p.timer);
        p.reject(new Error('view closed'));
      }
      pending.clear();
    }
  };
}

/** ``createRequests`` plus the graph view's requests by name (kept out of the other views' bundles). */
export function createTransport(model: AnyModel, timeoutMs = DEFAULT_TIMEOUT_MS): Transport {
  const requests = createRequests(model, timeoutMs);
  const { request } = requests;
  return {
    ...requests,
    async inspect(node) {
      const { msg } = await request('inspect', { node });
      return msg.detail;
    },
    async module(id) {
      const { msg } = await request('module', { module: id });
      return msg.detail;
    },
    async dot() {
      const { msg } = await request('dot');
      return msg.dot;
    },
    async graphvizSource() {
      const { buffers } = await request('graphviz', {}, Math.max(timeoutMs, 60_000));
      if (!buffers.length) {
        throw new Error('the kernel sent no Graphviz module');
      }
      return toArrayBuffer(buffers[0]);
    }
  };
}
