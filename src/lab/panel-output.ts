/**
 * What the side panel draws with the notebook's own renderers: a kernel widget by model id (the
 * memory timeline, the latest graph) in the panel, and a tensor's view in the main area, where
 * ``forgeviz.show(name)`` runs as a cell would and its outputs are drawn.
 *
 * @jupyterlab/outputarea is not a dependency, so the main-area output is a small one here: stream
 * text, rich outputs through the notebook's rendermime (widgets included), errors. The panel that
 * holds the outputs has the notebook's ``rendermime``, which forgeviz's own renderer (mime.ts) looks
 * for to draw the live widget rather than its saved picture.
 */
import type { ISessionContext } from '@jupyterlab/apputils';
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Panel, Widget } from '@lumino/widgets';
import type { TensorRow } from '../model/wire';
import { errorMessage } from '../render/common/chrome';
import { WIDGET_MIME } from './refresh';

/** What is used of a notebook's rendermime registry. */
export interface RendermimeLike {
  getFactory(mimeType: string): unknown;
  preferredMimeType(bundle: IRenderMime.IMimeModel['data'], safe?: 'ensure' | 'prefer' | 'any'): string | undefined;
  createRenderer(mimeType: string): IRenderMime.IRenderer;
}

type Kernel = NonNullable<NonNullable<ISessionContext['session']>['kernel']>;

/**
 * A mime model of ``data`` (trusted: forgeviz asked the kernel for it).
 *
 * @example
 * renderer.renderModel(mimeModel({ 'text/plain': 'hi' }))
 */
export function mimeModel(data: IRenderMime.IMimeModel['data'], metadata: IRenderMime.IMimeModel['metadata'] = {}): IRenderMime.IMimeModel {
  return { trusted: true, data, metadata, setData: () => undefined };
}

/**
 * The code that shows ``row`` in the kernel (forgeviz.show: its stride view or graph).
 *
 * @example
 * showCode({ name: 'model.fc1.weight' }) // 'import forgeviz\nforgeviz.show("model.fc1.weight")'
 */
export function showCode(row: Pick<TensorRow, 'name'>): string {
  return `import forgeviz\nforgeviz.show(${JSON.stringify(row.name)})`;
}

/**
 * The code that opens a recorded run (``forgeviz.open``, issue 28) in the kernel: the folder as a
 * Python string literal (JSON's escapes are Python's), trimmed.
 *
 * @example
 * openRunCode(' runs/exp1 ') // 'import forgeviz\nforgeviz.open("runs/exp1")'
 */
export function openRunCode(folder: string): string {
  return `import forgeviz\nforgeviz.open(${JSON.stringify(folder.trim())})`;
}

/**
 * A recorded run's tab title: the folder's last name, so a long path still reads in a tab (the whole
 * folder goes in the tab's tooltip).
 *
 * @example
 * runTitle('/home/me/projects/runs/exp1/') // 'forgeviz: exp1'
 */
export function runTitle(folder: string): string {
  const names = folder.trim().split(/[\\/]+/).filter(Boolean);
  return `forgeviz: ${names[names.length - 1] ?? folder.trim()}`;
}

/**
 * Draw the kernel widget ``modelId`` into ``host`` with ``rendermime``'s widget renderer; returns
 * what removes it.
 *
 * @example
 * const unmount = mountKernelWidget(notebook.content.rendermime, host, state.memory_model);
 */
export function mountKernelWidget(rendermime: RendermimeLike, host: HTMLElement, modelId: string): () => void {
  if (!rendermime.getFactory(WIDGET_MIME)) {
    host.textContent = 'This notebook cannot draw widgets (is @jupyter-widgets/jupyterlab-manager installed?)';
    return () => host.replaceChildren();
  }
  const renderer = rendermime.createRenderer(WIDGET_MIME);
  renderer.addClass('fv-panel-renderer');
  // a detached host (the panel not on the page yet) still gets the node; attach when it can
  if (host.isConnected) {
    Widget.attach(renderer, host);
  } else {
    host.appendChild(renderer.node);
  }
  renderer.renderModel(mimeModel({ [WIDGET_MIME]: { model_id: modelId, version_major: 2, version_minor: 0 } })).catch(err => {
    host.textContent = `could not draw the widget: ${errorMessage(err)}`;
  });
  return () => {
    if (renderer.isAttached) {
      Widget.detach(renderer);
    }
    renderer.dispose();
    host.replaceChildren();
  };
}

/** Strip terminal colours from a traceback line. */
const plain = (text: string) => text.replace(/\x1b\[[0-9;]*[A-Za-z]/g, '');

/**
 * The outputs of one execution, drawn as they come. Has ``rendermime`` (see the module's note).
 */
export class KernelOutput extends Panel {
  private future: ReturnType<Kernel['requestExecute']> | null = null;

  constructor(readonly rendermime: RendermimeLike) {
    super();
    this.addClass('fv-panel-output');
  }

  /** Run ``code`` in ``kernel`` (not stored in its history) and draw what it outputs. */
  async run(kernel: Kernel, code: string): Promise<void> {
    this.future?.dispose();
    const future = kernel.requestExecute({ code, silent: false, store_history: false, stop_on_error: true });
    this.future = future;
    future.onIOPub = msg => {
      const content = msg.content as Record<string, unknown>;
      switch (msg.header.msg_type) {
        case 'stream':
          this.text(String(content.text ?? ''), content.name === 'stderr');
          break;
        case 'display_data':
        case 'execute_result':
          this.rich(content.data as IRenderMime.IMimeModel['data'], (content.metadata ?? {}) as IRenderMime.IMimeModel['metadata']);
          break;
        case 'error':
          this.text(plain(((content.traceback as string[] | undefined) ?? [`${content.ename}: ${content.evalue}`]).join('\n')), true);
          break;
        case 'clear_output':
          this.widgets.slice().forEach(w => w.dispose());
          break;
      }
    };
    try {
      await future.done;
    } catch (err) {
      if (!this.isDisposed) {
        this.text(`forgeviz could not run ${JSON.stringify(code)}: ${errorMessage(err)}`, true);
      }
    }
  }

  private text(text: string, error: boolean): void {
    const w = new Widget({ node: document.createElement('pre') });
    w.addClass(error ? 'fv-panel-output-error' : 'fv-panel-output-text');
    w.node.textContent = text;
    this.addWidget(w);
  }

  private rich(data: IRenderMime.IMimeModel['data'], metadata: IRenderMime.IMimeModel['metadata']): void {
    const mime = this.rendermime.preferredMimeType(data, 'any');
    if (!mime) {
      return;
    }
    const renderer = this.rendermime.createRenderer(mime);
    const done = renderer.renderModel(mimeModel(data, metadata));
    this.addWidget(renderer); // right after renderModel, as Lab's output area does (mime.ts counts on it)
    done.catch(err => this.text(`could not draw the output: ${errorMessage(err)}`, true));
  }

  dispose(): void {
    if (!this.isDisposed) {
      this.future?.dispose();
      this.future = null;
    }
    super.dispose();
  }
}
