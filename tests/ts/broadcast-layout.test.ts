/** The broadcast animation's pure parts: frames, bytes, shapes, grids. */
import { describe, expect, it } from 'vitest';
import { bytesLine, expandCall, exprText, formatBytes, frameState, gridGeometry, isRepeat, sourceIndex, stretchedDims, tupleText, wrapText } from '../../src/render/broadcast/layout';
import { bigPlan, conflictPlan, matmulFailPlan, matmulPlan, okPlan } from './broadcast-fixtures';

describe('text', () => {
  it('formats bytes like forgeviz.model.broadcast.format_bytes', () => {
    expect(formatBytes(32 * 2 ** 20)).toBe('32 MiB');
    expect(formatBytes(4096)).toBe('4 KiB');
    expect(formatBytes(100)).toBe('100 B');
    expect(formatBytes(1536)).toBe('1.50 KiB');
    expect(formatBytes(3 * 2 ** 30)).toBe('3 GiB');
    expect(bytesLine(bigPlan())).toBe('result 32 MiB from inputs 32 MiB + 4 KiB');
    expect(bytesLine(conflictPlan())).toBeNull();
  });

  it('tuples, expressions, expand calls', () => {
    expect(tupleText([3, 4])).toBe('(3, 4)');
    expect(tupleText([3])).toBe('(3,)');
    expect(tupleText([])).toBe('()');
    expect(exprText(okPlan())).toBe('a + b');
    expect(exprText(matmulPlan())).toBe('a @ b');
    expect(exprText({ ...okPlan(), op: 'broadcast_tensors' })).toBe('broadcast_tensors(a, b)');
    expect(expandCall('b', [3, 4])).toBe('b.expand(3, 4)');
    expect(expandCall('x[0]', [3])).toBe('(x[0]).expand(3)');
  });

  it('wraps words', () => {
    expect(wrapText('one two three four', 9)).toEqual(['one two', 'three', 'four']);
    expect(wrapText('', 9)).toEqual(['']);
  });
});

describe('frames', () => {
  it('each frame adds what its step reveals', () => {
    const p = okPlan();
    const f = (k: number) => frameState(p, k);
    expect(f(0)).toMatchObject({ index: 0, padded: false, stretched: false, result: false, current: null });
    expect(f(1).padded).toBe(true);
    expect([...f(2).compared]).toEqual([1]);
    expect(f(2).current).toBe(1);
    expect([...f(3).compared]).toEqual([1, 0]);
    expect(f(4)).toMatchObject({ stretched: true, result: false, current: null });
    expect(f(5)).toMatchObject({ stretched: true, result: true });
    expect(f(99).index).toBe(5);
    expect(f(-1).index).toBe(0);
  });

  it('the conflict frame compares the conflicting dim', () => {
    const f = frameState(conflictPlan(), 3);
    expect(f).toMatchObject({ conflict: true, current: 1, result: false });
    expect([...f.compared]).toEqual([1]);
  });

  it('matmul: inner, then batch, then result', () => {
    const p = matmulPlan();
    expect(frameState(p, 0).inner).toBe(false);
    expect(frameState(p, 1).inner).toBe(true);
    expect([...frameState(p, 1).compared]).toEqual([]);
    expect([...frameState(p, 2).compared]).toEqual([0]);
    expect(frameState(p, 3).result).toBe(true);
    expect(frameState(matmulFailPlan(), 2)).toMatchObject({ conflict: true, inner: true, result: false });
  });

  it('without steps everything shows at once', () => {
    const p = okPlan();
    p.steps = [];
    expect(frameState(p, 0)).toMatchObject({ padded: true, stretched: true, result: true, conflict: false });
    const c = conflictPlan();
    c.steps = [];
    expect(frameState(c, 0)).toMatchObject({ conflict: true, result: false });
  });
});

describe('grids', () => {
  it('lays the last dim across, the one before down, leading dims as blocks', () => {
    const g = gridGeometry([2, 2, 3], 10, 20);
    expect(g.cells).toHaveLength(12);
    expect(g.width).toBe(30);
    expect(g.height).toBe(2 * 40 + 6);
    expect(g.at([1, 1, 2])).toEqual({ x: 20, y: 46 + 20 });
    expect(gridGeometry([4], 10, 20).height).toBe(20);
    expect(gridGeometry([], 10, 20).cells).toHaveLength(1);
  });

  it('repeats and source indices', () => {
    const p = okPlan();
    expect(stretchedDims(p.checks, 0)).toEqual([1]);
    expect(stretchedDims(p.checks, 1)).toEqual([0]);
    expect(isRepeat([2, 0], [1])).toBe(false);
    expect(isRepeat([2, 1], [1])).toBe(true);
    expect(sourceIndex(p.operands[0], [2, 1])).toEqual([2, 0]);
    const c = conflictPlan();
    expect(sourceIndex(c.operands[1], [2, 1])).toEqual([1]);
  });
});
