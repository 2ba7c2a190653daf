/** A stand-in for the anywidget model: traits, events, custom messages. */
type Handler = (...args: any[]) => void;

export class FakeModel {
  sent: any[] = [];
  private handlers = new Map<string, Set<Handler>>();
  constructor(private traits: Record<string, any>, private onSend?: (msg: any, model: FakeModel) => void) {}
  get(key: string) {
    return this.traits[key];
  }
  set(key: string, value: any) {
    this.traits[key] = value;
    this.emit(`change:${key}`);
  }
  on(name: string, cb: Handler) {
    if (!this.handlers.has(name)) {
      this.handlers.set(name, new Set());
    }
    this.handlers.get(name)!.add(cb);
  }
  off(name?: string | null, cb?: Handler | null) {
    if (!name) {
      this.handlers.clear();
    } else if (!cb) {
      this.handlers.delete(name);
    } else {
      this.handlers.get(name)?.delete(cb);
    }
  }
  listenerCount(name: string) {
    return this.handlers.get(name)?.size ?? 0;
  }
  emit(name: string, ...args: any[]) {
    for (const cb of Array.from(this.handlers.get(name) ?? [])) {
      cb(...args);
    }
  }
  /** The kernel answering a request. */
  reply(msg: any, buffers: DataView[] = []) {
    this.emit('msg:custom', msg, buffers);
  }
  send(msg: any) {
    this.sent.push(msg);
    this.onSend?.(msg, this);
  }
  save_changes() {}
  widget_manager = {} as any;
}
