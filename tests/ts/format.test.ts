import { describe, expect, it } from 'vitest';
import { formatCompact, formatNumber, formatValues, wireNumber } from '../../src/render/common/format';
import { parseLayout, splitLabel } from '../../src/render/graph/layout';
import { resolveVars } from '../../src/render/common/export';
import { summary } from './fixtures';
import { realLayout } from './graphviz';

describe('WireFloat', () => {
  it('parses NaN and infinities sent as strings', () => {
    expect(wireNumber('NaN')).toBeNaN();
    expect(wireNumber('Infinity')).toBe(Infinity);
    expect(wireNumber('-Infinity')).toBe(-Infinity);
    expect(wireNumber(2.5)).toBe(2.5);
    expect(wireNumber(null)).toBeNull();
    expect(formatNumber('NaN')).toBe('nan');
    expect(formatNumber('-Infinity')).toBe('-inf');
    expect(formatValues(['NaN', 'Infinity', '-Infinity', 1], [4], 'torch.float32')).toBe('[nan, inf, -inf, 1.]');
  });
});

describe('torch-like value formatting', () => {
  it('formats integral floats, fractions, ints, scalars and matrices', () => {
    expect(formatValues([48, 32], [2], 'torch.float32')).toBe('[48., 32.]');
    expect(formatValues([64], [1], 'torch.float32')).toBe('[64.]');
    expect(formatValues([64], [], 'torch.float32')).toBe('64.');
    expect(formatValues([0.123456, 2.5], [2], 'torch.float32')).toBe('[0.1235, 2.5000]');
    expect(formatValues([123456.7, 1], [2], 'torch.float64')).toBe('[1.2346e+5, 1.0000e+0]');
    expect(formatValues([3, 4], [2], 'torch.int64')).toBe('[3, 4]');
    expect(formatValues([1, 2, 3, 4], [2, 2], 'torch.float32')).toBe('[[1., 2.], [3., 4.]]');
  });
  it('compact numbers use 4 significant digits', () => {
    expect(formatNumber(64)).toBe('64');
    expect(formatNumber(0.333333)).toBe('0.3333');
    expect(formatNumber(1.5e-7)).toBe('1.5e-7');
    expect(formatCompact(summary([16]))).toBe('16');
    expect(formatCompact(summary([16, 8]))).toBe('[16, 8]');
    expect(formatCompact(null)).toBe('∅');
  });
});

describe('layout parsing', () => {
  it('splits labels on the escaped newline only', () => {
    expect(splitLabel('x\\nleaf')).toEqual(['x', 'leaf']);
    expect(splitLabel('a\\\\b')).toEqual(['a\\b']);
    expect(splitLabel('one')).toEqual(['one']);
  });
  it('flips y using the bounding box and converts inches to points', async () => {
    const lay = parseLayout(await realLayout('digraph { a -> b }'));
    const a = lay.nodes.find(n => n.name === 'a')!;
    const b = lay.nodes.find(n => n.name === 'b')!;
    expect(a.cy).toBeLessThan(b.cy); // a on top after flipping
    expect(a.w).toBeCloseTo(54); // default width 0.75in
    expect(a.h).toBeCloseTo(36);
    expect(a.cy - a.h / 2).toBeCloseTo(0); // top of the bounding box
    expect(Number.isNaN(a.id)).toBe(true); // not a forgeviz "n<id>" name
    expect(lay.edges).toHaveLength(1);
  });
});

describe('CSS variables in export', () => {
  it('resolves var() with nesting and fallbacks', () => {
    const vars: Record<string, string> = { '--a': '#111', '--fv-fg': 'var(--jp-x, #222)' };
    const look = (n: string) => vars[n] ?? '';
    expect(resolveVars('var(--a)', look)).toBe('#111');
    expect(resolveVars('var(--missing, #abc)', look)).toBe('#abc');
    expect(resolveVars('var(--missing, var(--a))', look)).toBe('#111');
    expect(resolveVars('var(--fv-fg)', look)).toBe('#222');
  });
});
